// The CPU reference backend: the Llama forward pass of transformers' LlamaForCausalLM
// (eager attention) in fp32, over weights read in place from a WeightStore, with a paged KV
// cache. Every request of a batch is flattened into one [T, hidden] activation matrix so the
// weights stream once per block of tokens; attention then reads each token's own sequence.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "engine/cpu/kv_cache.h"
#include "engine/cpu/ops.h"
#include "kernelllm/base/thread_pool.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm {
namespace cpu {
namespace {

struct LayerWeights {
  std::vector<float> input_norm;  // [hidden] f32
  std::vector<float> post_norm;   // [hidden] f32
  WeightMatrix q, k, v, o;        // [heads*hd, hidden], [kv*hd, hidden] x2, [hidden, heads*hd]
  WeightMatrix gate, up, down;    // [inter, hidden] x2, [hidden, inter]
};

Result<WeightMatrix> matrix(const WeightStore& store, const std::string& name, int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  KLLM_ASSIGN_OR_RETURN(TensorView t, store.get_float(name, shape));
  return WeightMatrix{t.data.data(), t.dtype, rows, cols};
}

Result<std::vector<float>> vector(const WeightStore& store, const std::string& name, int64_t n) {
  const int64_t shape[1] = {n};
  KLLM_ASSIGN_OR_RETURN(TensorView t, store.get_float(name, shape));
  return to_float_vector(t);
}

Status check_config(const ModelConfig& c, const CpuBackendOptions& o) {
  auto bad = [](const std::string& what) { return error(ErrorCode::unsupported, "cpu backend: " + what); };
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 || c.vocab_size <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
      c.max_position_embeddings <= 0) {
    return bad("expected positive sizes in the model config");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad("expected num_attention_heads (" + std::to_string(c.num_attention_heads) +
               ") to be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  }
  if (c.head_dim % 2 != 0) return bad("expected an even head_dim, found " + std::to_string(c.head_dim));
  if (c.attention_bias || c.mlp_bias) return bad("attention_bias / mlp_bias are not supported");
  if (c.hidden_act != "silu") return bad("expected hidden_act silu, found " + c.hidden_act);
  if (o.kv_page_tokens <= 0 || o.max_sequences <= 0) {
    return error(ErrorCode::invalid_argument, "cpu backend: expected kv_page_tokens > 0 and max_sequences > 0");
  }
  return Status::ok_status();
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelConfig& config, const CpuBackendOptions& options)
      : config_(config),
        pool_(options.num_threads),
        kv_(config.num_hidden_layers, config.num_key_value_heads * config.head_dim, options.kv_page_tokens,
            options.max_sequences),
        inv_freq_(rope_inv_freq(config)) {}

  Status load(const WeightStore& store) {
    const ModelConfig& c = config_;
    const int64_t hd = c.head_dim, h = c.hidden_size;
    KLLM_ASSIGN_OR_RETURN(embed_, matrix(store, "model.embed_tokens.weight", c.vocab_size, h));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      LayerWeights l;
      KLLM_ASSIGN_OR_RETURN(l.input_norm, vector(store, p + "input_layernorm.weight", h));
      KLLM_ASSIGN_OR_RETURN(l.post_norm, vector(store, p + "post_attention_layernorm.weight", h));
      KLLM_ASSIGN_OR_RETURN(l.q, matrix(store, p + "self_attn.q_proj.weight", c.num_attention_heads * hd, h));
      KLLM_ASSIGN_OR_RETURN(l.k, matrix(store, p + "self_attn.k_proj.weight", c.num_key_value_heads * hd, h));
      KLLM_ASSIGN_OR_RETURN(l.v, matrix(store, p + "self_attn.v_proj.weight", c.num_key_value_heads * hd, h));
      KLLM_ASSIGN_OR_RETURN(l.o, matrix(store, p + "self_attn.o_proj.weight", h, c.num_attention_heads * hd));
      KLLM_ASSIGN_OR_RETURN(l.gate, matrix(store, p + "mlp.gate_proj.weight", c.intermediate_size, h));
      KLLM_ASSIGN_OR_RETURN(l.up, matrix(store, p + "mlp.up_proj.weight", c.intermediate_size, h));
      KLLM_ASSIGN_OR_RETURN(l.down, matrix(store, p + "mlp.down_proj.weight", h, c.intermediate_size));
      layers_.push_back(std::move(l));
    }
    KLLM_ASSIGN_OR_RETURN(final_norm_, vector(store, "model.norm.weight", h));
    if (c.tie_word_embeddings) {
      lm_head_ = embed_;
    } else {
      KLLM_ASSIGN_OR_RETURN(lm_head_, matrix(store, "lm_head.weight", c.vocab_size, h));
    }
    return Status::ok_status();
  }

  std::string_view name() const override { return "cpu"; }
  const ModelConfig& config() const override { return config_; }
  Result<SeqId> create_sequence() override { return kv_.create(); }
  Result<SeqId> fork_sequence(SeqId parent) override { return kv_.fork(parent); }
  void release_sequence(SeqId seq) override { kv_.release(seq); }
  int64_t sequence_length(SeqId seq) const override { return kv_.length(seq); }

  Status forward(std::span<const ForwardRequest> batch, std::vector<float>& logits) override;

 private:
  Status validate_batch(std::span<const ForwardRequest> batch) const;
  void attention(int64_t layer, const std::vector<SeqId>& seq_of, const std::vector<int64_t>& pos_of,
                 const std::vector<float>& q, std::vector<float>& out);

  ModelConfig config_;
  ThreadPool pool_;
  PagedKvCache kv_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  WeightMatrix embed_;           // [vocab, hidden]
  std::vector<LayerWeights> layers_;
  std::vector<float> final_norm_;  // [hidden]
  WeightMatrix lm_head_;           // [vocab, hidden]; the embedding when tied
};

Status CpuBackend::validate_batch(std::span<const ForwardRequest> batch) const {
  std::unordered_set<SeqId> seen;
  for (size_t r = 0; r < batch.size(); ++r) {
    const ForwardRequest& req = batch[r];
    const std::string where = "forward request " + std::to_string(r) + ": ";
    if (!kv_.contains(req.seq)) {
      return error(ErrorCode::not_found, where + "unknown sequence " + std::to_string(req.seq));
    }
    if (!seen.insert(req.seq).second) {
      return error(ErrorCode::invalid_argument, where + "sequence " + std::to_string(req.seq) + " appears twice");
    }
    if (req.tokens.empty()) return error(ErrorCode::invalid_argument, where + "expected >= 1 token, found none");
    for (int32_t id : req.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        return error(ErrorCode::out_of_range, where + "expected token ids in [0, " +
                                                  std::to_string(config_.vocab_size) + "), found " +
                                                  std::to_string(id));
      }
    }
    const int64_t end = kv_.length(req.seq) + static_cast<int64_t>(req.tokens.size());
    if (end > config_.max_position_embeddings) {
      return error(ErrorCode::out_of_range, where + "expected positions < max_position_embeddings (" +
                                                std::to_string(config_.max_position_embeddings) +
                                                "), found up to " + std::to_string(end - 1));
    }
  }
  return Status::ok_status();
}

void CpuBackend::attention(int64_t layer, const std::vector<SeqId>& seq_of, const std::vector<int64_t>& pos_of,
                           const std::vector<float>& q, std::vector<float>& out) {
  const int64_t heads = config_.num_attention_heads, hd = config_.head_dim;
  const int64_t group = heads / config_.num_key_value_heads;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const auto n_tokens = static_cast<int64_t>(seq_of.size());
  pool_.parallel_for(n_tokens * heads, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t t = job / heads, h = job % heads;
      const int64_t kv_off = (h / group) * hd;
      const SeqId seq = seq_of[static_cast<size_t>(t)];
      const int64_t n_ctx = pos_of[static_cast<size_t>(t)] + 1;  // causal: positions 0..pos
      const float* qh = q.data() + (t * heads + h) * hd;
      scores.resize(static_cast<size_t>(n_ctx));
      for (int64_t p = 0; p < n_ctx; ++p) {
        const float* kp = kv_.key(seq, layer, p) + kv_off;
        float s = 0.0f;
        for (int64_t d = 0; d < hd; ++d) s += qh[d] * kp[d];
        scores[static_cast<size_t>(p)] = s * scale;
      }
      softmax(scores.data(), n_ctx);
      float* oh = out.data() + (t * heads + h) * hd;
      std::fill(oh, oh + hd, 0.0f);
      for (int64_t p = 0; p < n_ctx; ++p) {
        const float* vp = kv_.value(seq, layer, p) + kv_off;
        const float w = scores[static_cast<size_t>(p)];
        for (int64_t d = 0; d < hd; ++d) oh[d] += w * vp[d];
      }
    }
  });
}

Status CpuBackend::forward(std::span<const ForwardRequest> batch, std::vector<float>& logits) {
  KLLM_RETURN_IF_ERROR(validate_batch(batch));
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const int64_t q_dim = c.num_attention_heads * hd, kv_dim = c.num_key_value_heads * hd;
  const int64_t inter = c.intermediate_size;

  // Flatten the batch: token t belongs to seq_of[t] at position pos_of[t].
  std::vector<int32_t> ids;
  std::vector<SeqId> seq_of;
  std::vector<int64_t> pos_of;
  std::vector<int64_t> out_rows;  // which tokens produce logits, in output order
  for (const ForwardRequest& req : batch) {
    const int64_t start = kv_.length(req.seq);
    const auto n = static_cast<int64_t>(req.tokens.size());
    for (int64_t i = 0; i < n; ++i) {
      if (req.all_logits || i == n - 1) out_rows.push_back(static_cast<int64_t>(ids.size()));
      ids.push_back(req.tokens[static_cast<size_t>(i)]);
      seq_of.push_back(req.seq);
      pos_of.push_back(start + i);
    }
    kv_.extend(req.seq, n);
  }
  const auto T = static_cast<int64_t>(ids.size());

  // Activations, row-major per token.
  std::vector<float> x(static_cast<size_t>(T * hidden));    // residual stream [T, hidden]
  std::vector<float> xn(static_cast<size_t>(T * hidden));   // normed [T, hidden]
  std::vector<float> q(static_cast<size_t>(T * q_dim));     // [T, heads*hd]
  std::vector<float> k(static_cast<size_t>(T * kv_dim));    // [T, kv*hd]
  std::vector<float> v(static_cast<size_t>(T * kv_dim));    // [T, kv*hd]
  std::vector<float> att(static_cast<size_t>(T * q_dim));   // [T, heads*hd]
  std::vector<float> proj(static_cast<size_t>(T * hidden)); // o_proj / down_proj output [T, hidden]
  std::vector<float> gate(static_cast<size_t>(T * inter));  // [T, inter]
  std::vector<float> up(static_cast<size_t>(T * inter));    // [T, inter]
  std::vector<float> cos_t(static_cast<size_t>(T * half)), sin_t(static_cast<size_t>(T * half));

  for (int64_t t = 0; t < T; ++t) {
    load_row(embed_, ids[static_cast<size_t>(t)], x.data() + t * hidden);
    rope_cos_sin(inv_freq_, pos_of[static_cast<size_t>(t)], cos_t.data() + t * half, sin_t.data() + t * half);
  }

  auto norm_all = [&](const std::vector<float>& weight) {
    pool_.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) rms_norm(x.data() + t * hidden, weight.data(), hidden, c.rms_norm_eps, xn.data() + t * hidden);
    });
  };
  auto add_into_x = [&]() {
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  };

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    norm_all(w.input_norm);
    matmul(w.q, xn.data(), T, q.data(), pool_);
    matmul(w.k, xn.data(), T, k.data(), pool_);
    matmul(w.v, xn.data(), T, v.data(), pool_);
    for (int64_t t = 0; t < T; ++t) {
      const float* cs = cos_t.data() + t * half;
      const float* sn = sin_t.data() + t * half;
      for (int64_t h = 0; h < c.num_attention_heads; ++h) rope_apply(q.data() + t * q_dim + h * hd, cs, sn, half);
      for (int64_t h = 0; h < c.num_key_value_heads; ++h) rope_apply(k.data() + t * kv_dim + h * hd, cs, sn, half);
      const SeqId s = seq_of[static_cast<size_t>(t)];
      const int64_t p = pos_of[static_cast<size_t>(t)];
      std::copy_n(k.data() + t * kv_dim, kv_dim, kv_.key(s, l, p));
      std::copy_n(v.data() + t * kv_dim, kv_dim, kv_.value(s, l, p));
    }
    attention(l, seq_of, pos_of, q, att);
    matmul(w.o, att.data(), T, proj.data(), pool_);
    add_into_x();

    norm_all(w.post_norm);
    matmul(w.gate, xn.data(), T, gate.data(), pool_);
    matmul(w.up, xn.data(), T, up.data(), pool_);
    silu_mul(gate.data(), up.data(), T * inter, gate.data());
    matmul(w.down, gate.data(), T, proj.data(), pool_);
    add_into_x();
  }

  const auto R = static_cast<int64_t>(out_rows.size());
  std::vector<float> final_rows(static_cast<size_t>(R * hidden));  // [R, hidden]
  for (int64_t r = 0; r < R; ++r) {
    rms_norm(x.data() + out_rows[static_cast<size_t>(r)] * hidden, final_norm_.data(), hidden, c.rms_norm_eps,
             final_rows.data() + r * hidden);
  }
  logits.assign(static_cast<size_t>(R * c.vocab_size), 0.0f);
  matmul(lm_head_, final_rows.data(), R, logits.data(), pool_);
  return Status::ok_status();
}

}  // namespace
}  // namespace cpu

Result<std::unique_ptr<Backend>> make_cpu_backend(const ModelConfig& config, const WeightStore& weights,
                                                   const CpuBackendOptions& options) {
  KLLM_RETURN_IF_ERROR(cpu::check_config(config, options));
  auto backend = std::make_unique<cpu::CpuBackend>(config, options);
  KLLM_RETURN_IF_ERROR(backend->load(weights).with_context("cpu backend: loading weights"));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace kernelllm
