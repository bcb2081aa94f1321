// The CUDA backend's forward pass (see cuda_backend.h): batch flattening, KV page updates,
// chunks of at most max_batch_tokens tokens, the per-layer launch sequence, CUDA graphs for
// single-token passes, and the public factory functions.
#include <algorithm>
#include <string>
#include <utility>

#include "engine/cuda/argmax.cuh"
#include "engine/cuda/attention.cuh"
#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/backend_impl.h"
#include "engine/cuda/embedding.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/rmsnorm.cuh"
#include "engine/cuda/rope.cuh"
#include "engine/cuda/sample.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm {
namespace cuda {
namespace {
constexpr int64_t kMaxGraphTokens = 256;
}  // namespace

Status CudaBackend::run_layers(int64_t n, int64_t r, int64_t q_blocks, bool logits_in_pass, bool shared,
                               bool single_token) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  // Which kernel serves each projection and the attention (engine/cuda_plan.h).
  const PassPlan plan = plan_->pass(n, q_blocks, single_token, shared);
  const int32_t* ids = meta_.as<int32_t>();
  const int32_t* pos = ids + max_tokens_;
  const int32_t* seq = pos + max_tokens_;
  const int32_t* page = seq + max_tokens_;
  const int32_t* out_rows = page + max_tokens_;
  const int32_t* qb_start = out_rows + max_tokens_;
  const int32_t* qb_len = qb_start + max_tokens_;
  const int32_t* ctx_begin = qb_len + max_tokens_;
  SharedPrefixArgs sp;
  sp.item_seq = ctx_begin + max_tokens_;
  sp.item_prefix = sp.item_seq + max_tokens_;
  sp.item_first = sp.item_prefix + max_tokens_;
  sp.item_count = sp.item_first + max_tokens_;
  sp.members = sp.item_count + max_tokens_;
  // Queries and softmax weights rounded to the cache dtype, as FlashAttention computes (the high
  // and low halves cost 0.025 ms a step at k = 20; docs/cuda-engine.md, Attention).
  sp.low_halves = false;
  sp.kv_evict_first = plan.kv_evict_first;
  const bool cascade = plan.attention == AttentionKind::cascade;
  // The forks' own positions (suffix) are few next to the prompt's: half the splits of a plain
  // pass (2 at n = 20; ops bench: 32.8 / 94.5 us a layer at 0 / 1,024 generated tokens, against
  // 40.6 / 108.1 with 4). Both within the scratch's max_tokens_ / n slots per token.
  const int64_t prefix_splits = cascade ? prefix_splits_for(n) : 0;
  const int64_t suffix_splits = std::max<int64_t>(1, splits_for(n) / 2);
  // The band GEMM's parts: their part counts (0: band_parts_for's choice). The consumer adds
  // them: rope_write_kv for qkv, the next norm for o and down.
  const auto parts_of = [&](const ProjPlan& p, int64_t rows, int64_t cols) {
    if (p.kernel != ProjKernel::band_parts) return 0;
    return p.parts > 0 ? p.parts : band_parts_for(BandConfig{}, rows, cols, n, sm_count_);
  };
  const int qkv_parts = parts_of(plan.qkv, q_dim_ + 2 * kv_dim_, h);
  const int o_parts = parts_of(plan.o, h, q_dim_);
  const int down_parts = parts_of(plan.down, h, inter);
  // Where o's parts serve, the prefix kernel asks the first 1,024 bytes of each part of its rows
  // into L2 as 128-byte lines (L2Prefetch; base set per layer), the parts' offsets a share's width
  // apart (exact where the shares are equal, as for the 8B o).
  L2Prefetch o_prefetch;
  if (plan.o_prefetch && o_parts > 0) {
    const auto esize = static_cast<int64_t>(dtype_size(dtype_));
    const int64_t stride = band_part_first_col(q_dim_, o_parts, 1) * esize;
    o_prefetch = L2Prefetch{nullptr, h, q_dim_ * esize, stride, o_parts,
                            static_cast<int>(std::min<int64_t>(1024, stride) / 16 * 16), true};
  }
  float* x = x_.as<float>();
  float* parts = band_parts_.as<float>();
  // The pool's page count lets the own-position kernel copy its rows by TMA (suffix_tma_serves).
  const KvLayout kv{kv_pool_.get(), c.num_hidden_layers, opts_.kv_page_tokens, kv_dim_,
                    plan.tma_suffix ? pages_->num_pages() : 0};

  // The residual stream x; pending: a projection output not yet added to it (the GEMV's in proj_,
  // or pending_parts parts of the band GEMM's), which the next norm adds (the other kernels
  // accumulate into x themselves).
  const float* pending = nullptr;
  int pending_parts = 1;
  auto norm = [&](const DeviceBuffer& weight) {
    if (pending != nullptr) {
      add_rmsnorm(dtype_, x, pending, weight.as<float>(), n, h, eps, xn_.get(), stream_, pending_parts);
    } else {
      rmsnorm(dtype_, x, weight.as<float>(), n, h, eps, nullptr, xn_.get(), stream_);
    }
    pending = nullptr;
  };
  // o or down (h rows over `cols`): into x, or pending for the next norm.
  auto residual_proj = [&](const ProjPlan& how, const DeviceBuffer& w, int64_t cols, const void* in,
                           int n_parts) -> Status {
    if (n_parts > 0) {
      pending = parts;
      pending_parts = n_parts;
      return band_gemm_parts(BandConfig{}, dtype_, w.get(), h, cols, in, n, parts, n_parts, sm_count_, stream_);
    }
    const bool fresh = how.kernel == ProjKernel::gemv;
    pending = fresh ? proj_.as<float>() : nullptr;
    pending_parts = 1;
    return proj(how, w, h, cols, in, n, fresh ? proj_.get() : static_cast<void*>(x), DType::f32, !fresh);
  };
  // The lookup and the first layer's input norm in one kernel.
  if (layers_.empty()) {
    embedding(dtype_, embed_.get(), ids, n, h, x, stream_);
  } else {
    embed_rmsnorm(dtype_, embed_.get(), ids, n, h, layers_.front().in_norm.as<float>(), eps, x, xn_.get(), stream_);
  }
  // qkv in the compute dtype where cuBLASLt or the skinny/staged/band GEMMs serve (as HF's bf16
  // linear layers give it); fp32 from the GEMV and as the band GEMM's parts.
  const DType qkv_type = plan.qkv.kernel == ProjKernel::gemv || qkv_parts > 0 ? DType::f32 : dtype_;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    const Layer& l = layers_[static_cast<size_t>(li)];
    if (li > 0) norm(l.in_norm);
    if (qkv_parts > 0) {
      KLLM_RETURN_IF_ERROR(band_gemm_parts(BandConfig{}, dtype_, l.qkv.get(), q_dim_ + 2 * kv_dim_, h, xn_.get(), n,
                                           parts, qkv_parts, sm_count_, stream_));
    } else {
      KLLM_RETURN_IF_ERROR(proj(plan.qkv, l.qkv, q_dim_ + 2 * kv_dim_, h, xn_.get(), n, qkv_.get(), qkv_type));
    }
    AttentionArgs a;
    a.q = q_.as<float>();
    a.n_tokens = n;
    a.heads = c.num_attention_heads;
    a.kv_heads = c.num_key_value_heads;
    a.head_dim = c.head_dim;
    a.seq = seq;
    a.pos = pos;
    a.block_table = block_table_.as<int32_t>();
    a.table_width = table_width_;
    a.kv = kv;
    a.layer = li;
    a.splits = splits_for(n);
    a.partial_acc = part_acc_.as<float>();
    a.partial_ml = part_ml_.as<float>();
    a.out = att_.get();
    a.q_block_start = qb_start;
    a.q_block_len = qb_len;
    a.n_q_blocks = q_blocks;
    a.kv_evict_first = plan.kv_evict_first;
    if (plan.fused_rope && attention_partial_folds_rope(dtype_, a, cascade ? suffix_splits : a.splits)) {
      a.rope_qkv = qkv_.get();
      a.rope_qkv_f32 = qkv_type == DType::f32;
      a.rope_inv_freq = inv_freq_.as<float>();
      a.rope_q_out = cascade ? q_.as<float>() : nullptr;  // the prefix kernel reads the rotated queries
    } else {
      rope_write_kv(dtype_, qkv_type, qkv_parts > 0 ? static_cast<void*>(parts) : qkv_.get(), n,
                    c.num_attention_heads, c.num_key_value_heads, c.head_dim, pos, page, inv_freq_.as<float>(), kv, li,
                    q_.as<float>(), stream_, std::max(qkv_parts, 1));
    }
    if (plan.attention == AttentionKind::prefill) {
      prefill_attention(dtype_, a, stream_, plan.prefill);
    } else if (cascade) {
      a.ctx_begin = ctx_begin;
      a.splits = suffix_splits + prefix_splits;
      if (o_prefetch.bytes > 0) o_prefetch.base = l.o.get();
      SharedPrefixArgs with_o = sp;
      with_o.next_weights = o_prefetch;
      shared_prefix_attention(dtype_, a, with_o, suffix_splits, prefix_splits, stream_, plan.mma_suffix);
    } else {
      attention(dtype_, a, stream_);
    }
    // o and down: the GEMV and the band GEMM's parts leave their output for the next norm to
    // add; the others add into x in place.
    KLLM_RETURN_IF_ERROR(residual_proj(plan.o, l.o, q_dim_, att_.get(), o_parts));
    norm(l.post_norm);
    // gate_up, the largest activation: where the GEMV (one token) or the band GEMM (17..32
    // tokens) serves, it writes the SwiGLU activation itself; else in the compute dtype (as HF's
    // bf16 linear layers give it: half the bytes written and read back by swiglu), f32 from the GEMV.
    if (plan.gate_up.swiglu && plan.gate_up.kernel == ProjKernel::gemv) {
      gemv_swiglu(dtype_, l.gate_up.get(), inter, h, xn_.get(), n, act_.get(), stream_);
    } else if (plan.gate_up.swiglu) {
      KLLM_RETURN_IF_ERROR(band_gemm_swiglu(BandConfig{}, dtype_, l.gate_up.get(), inter, h, xn_.get(), n,
                                            act_.get(), sm_count_, stream_));
    } else {
      const DType gate_up_type = plan.gate_up.kernel == ProjKernel::gemv ? DType::f32 : dtype_;
      KLLM_RETURN_IF_ERROR(proj(plan.gate_up, l.gate_up, 2 * inter, h, xn_.get(), n, gate_up_.get(), gate_up_type));
      swiglu(dtype_, gate_up_type, gate_up_.get(), n, inter, act_.get(), stream_);
    }
    KLLM_RETURN_IF_ERROR(residual_proj(plan.down, l.down, inter, act_.get(), down_parts));
  }
  // The final norm of the rows that produce logits, after the last residual add if one is
  // pending. A pending add is one kernel with the norm: in a pass with its logits (single tokens:
  // every row produces logits, in order) its output is the logits' input; otherwise it goes to
  // xn_ unused (the add into x is what counts) and run_chunk norms the rows.
  if (pending != nullptr) {
    add_rmsnorm(dtype_, x, pending, final_norm_.as<float>(), n, h, eps, logits_in_pass ? fin_.get() : xn_.get(),
                stream_, pending_parts);
  } else if (logits_in_pass) {
    rmsnorm(dtype_, x, final_norm_.as<float>(), r, h, eps, out_rows, fin_.get(), stream_);
  }
  if (logits_in_pass) {
    const DeviceBuffer& head = c.tie_word_embeddings ? embed_ : lm_head_;
    KLLM_RETURN_IF_ERROR(proj(plan.lm_head, head, c.vocab_size, h, fin_.get(), r, logits_dev_.as<float>()));
  }
  return cuda_status(cudaGetLastError(), "launching the forward pass");
}

Status CudaBackend::launch_decode_layers(int64_t n, bool shared) {
  if (!opts_.cuda_graphs || n > std::min(kMaxGraphTokens, max_logit_rows_)) {
    return run_layers(n, n, 0, true, shared, true);
  }
  const int64_t key = 2 * n + (shared ? 1 : 0);
  auto it = graphs_.find(key);
  if (it == graphs_.end() && graph_seen_[key]++ >= 1) {
    // Captured on its second use: the first ran eagerly, so lazy library setup is done. The
    // capture starts on an idle stream (a decode step may be in flight when the chain launches
    // the next one).
    KLLM_CUDA_RETURN(cudaStreamSynchronize(stream_), "before a graph capture");
    cudaGraph_t g = nullptr;
    KLLM_CUDA_RETURN(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture");
    const Status s = run_layers(n, n, 0, true, shared, true);
    const cudaError_t end = cudaStreamEndCapture(stream_, &g);
    KLLM_RETURN_IF_ERROR(s);
    KLLM_CUDA_RETURN(end, "end capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    KLLM_CUDA_RETURN(inst, "instantiate graph");
    it = graphs_.emplace(key, exec).first;
  }
  if (it != graphs_.end()) {
    KLLM_CUDA_RETURN(cudaGraphLaunch(it->second, stream_), "graph launch");
    return Status::ok_status();
  }
  return run_layers(n, n, 0, true, shared, true);
}

Status CudaBackend::download_rows(int64_t rn, int64_t r0, float* logits_out, int32_t* ids_out) {
  const int64_t vocab = config_.vocab_size;
  if (logits_out == nullptr && ids_out == nullptr) return draw_on_device(draw_row0_ + r0, rn);
  if (ids_out != nullptr) {
    argmax_rows(logits_dev_.as<float>(), rn, vocab, ids_dev_.as<int32_t>(),
                cluster_blocks_per_row(plan_->feature_major(), sm_count_, rn, kArgmaxBlocksPerSm), stream_);
    KLLM_CUDA_RETURN(cudaMemcpyAsync(ids_out + r0, ids_dev_.get(), static_cast<size_t>(rn) * 4,
                                     cudaMemcpyDeviceToHost, stream_),
                     "greedy ids download");
    return Status::ok_status();
  }
  KLLM_CUDA_RETURN(cudaMemcpyAsync(logits_out + r0 * vocab, logits_dev_.get(), static_cast<size_t>(rn * vocab) * 4,
                                   cudaMemcpyDeviceToHost, stream_),
                   "logits download");
  return Status::ok_status();
}

Status CudaBackend::run_chunk(int64_t n, int64_t r, int64_t q_blocks, bool single_token, bool shared,
                              float* logits_out, int32_t* ids_out) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  // Each field holds at most n entries: the first n of every row of the [fields][max_tokens_] table.
  const auto pitch = static_cast<size_t>(max_tokens_) * 4;
  KLLM_CUDA_RETURN(cudaMemcpy2DAsync(meta_.get(), pitch, meta_host_, pitch, static_cast<size_t>(n) * 4,
                                     static_cast<size_t>(kMetaFields), cudaMemcpyHostToDevice, stream_),
                   "metadata upload");
  const bool graph = opts_.cuda_graphs && single_token && n == r && n <= std::min(kMaxGraphTokens, max_logit_rows_);
  if (graph) {
    KLLM_RETURN_IF_ERROR(launch_decode_layers(n, shared));
    KLLM_RETURN_IF_ERROR(download_rows(r, 0, logits_out, ids_out));
    return cuda_status(cudaStreamSynchronize(stream_), "decode step");
  }
  KLLM_RETURN_IF_ERROR(run_layers(n, r, single_token ? 0 : q_blocks, false, shared, single_token));
  // Logits in blocks of max_logit_rows_ rows.
  const DeviceBuffer& head = c.tie_word_embeddings ? embed_ : lm_head_;
  const int32_t* out_rows = meta_.as<int32_t>() + 4 * max_tokens_;
  for (int64_t r0 = 0; r0 < r; r0 += max_logit_rows_) {
    const int64_t rn = std::min(max_logit_rows_, r - r0);
    rmsnorm(dtype_, x_.as<float>(), final_norm_.as<float>(), rn, h, static_cast<float>(c.rms_norm_eps), out_rows + r0,
            fin_.get(), stream_);
    KLLM_RETURN_IF_ERROR(proj(plan_->projection(c.vocab_size, h, rn), head, c.vocab_size, h, fin_.get(), rn,
                              logits_dev_.as<float>()));
    KLLM_RETURN_IF_ERROR(download_rows(rn, r0, logits_out, ids_out));
  }
  KLLM_CUDA_RETURN(cudaGetLastError(), "launching the logits");
  return cuda_status(cudaStreamSynchronize(stream_), "forward chunk");
}

Status CudaBackend::forward(std::span<const ForwardRequest> batch, std::vector<float>& logits) {
  KLLM_RETURN_IF_ERROR(cancel_ahead());
  return forward_rows(batch, &logits, nullptr);
}

Status CudaBackend::forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens) {
  KLLM_RETURN_IF_ERROR(cancel_ahead());
  return forward_rows(batch, nullptr, &tokens);
}

Status CudaBackend::reserve_draws(size_t n) {
  if (n <= draw_capacity_) return Status::ok_status();
  const size_t cap = std::max<size_t>(n, 2 * draw_capacity_);
  if (draws_host_ != nullptr) cudaFreeHost(draws_host_);
  if (draw_ids_host_ != nullptr) cudaFreeHost(draw_ids_host_);
  draws_host_ = nullptr;
  draw_ids_host_ = nullptr;
  draw_capacity_ = 0;
  KLLM_CUDA_RETURN(cudaMallocHost(&draws_host_, cap * sizeof(sample_block::Draw)), "pinned draws");
  KLLM_CUDA_RETURN(cudaMallocHost(&draw_ids_host_, cap * 4), "pinned drawn ids");
  KLLM_RETURN_IF_ERROR(draws_dev_.allocate(cap * sizeof(sample_block::Draw), "draws"));
  KLLM_RETURN_IF_ERROR(draw_ids_dev_.allocate(cap * 4, "drawn ids"));
  draw_capacity_ = cap;
  return Status::ok_status();
}

Status CudaBackend::draw_on_device(int64_t row0, int64_t rn) {
  // draw_order_ is sorted by row: the draws of these rows are one run of it.
  const auto row_of = [&](size_t i) { return draws_[i].row; };
  const auto first = std::partition_point(draw_order_.begin(), draw_order_.end(),
                                          [&](size_t i) { return row_of(i) < row0; });
  const auto last = std::partition_point(first, draw_order_.end(), [&](size_t i) { return row_of(i) < row0 + rn; });
  const auto b = static_cast<size_t>(first - draw_order_.begin()), e = static_cast<size_t>(last - draw_order_.begin());
  if (b == e) return Status::ok_status();
  for (size_t j = b; j < e; ++j) {
    const RowDraw& d = draws_[draw_order_[j]];
    draws_host_[j] = device_draw(d, d.row - row0);
  }
  auto* dev = draws_dev_.as<sample_block::Draw>();
  KLLM_CUDA_RETURN(cudaMemcpyAsync(dev + b, draws_host_ + b, (e - b) * sizeof(sample_block::Draw),
                                   cudaMemcpyHostToDevice, stream_),
                   "draws upload");
  const auto n_draws = static_cast<int64_t>(e - b);
  sample_rows(logits_dev_.as<float>(), config_.vocab_size, dev + b, n_draws, draw_ids_dev_.as<int32_t>() + b,
              cluster_blocks_per_row(plan_->feature_major(), sm_count_, n_draws), stream_);
  KLLM_CUDA_RETURN(cudaMemcpyAsync(draw_ids_host_ + b, draw_ids_dev_.as<int32_t>() + b, (e - b) * 4,
                                   cudaMemcpyDeviceToHost, stream_),
                   "drawn ids download");
  return Status::ok_status();
}

Status CudaBackend::forward_sample(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                                   std::vector<int32_t>& tokens) {
  KLLM_RETURN_IF_ERROR(validate_draws(batch, draws));
  const bool greedy =
      std::all_of(draws.begin(), draws.end(), [](const RowDraw& d) { return d.params.temperature == 0.0f; });
  const bool on_device = greedy || (plan_->device_sampling() && config_.vocab_size <= sample_block::kMaxVocab);
  const bool chained = plan_->chain() && on_device &&
                       static_cast<int64_t>(batch.size()) <= std::min(max_logit_rows_, max_tokens_) &&
                       chain_serves(batch, draws);
  if (ahead_) {
    // The step launched ahead is this one, perhaps without the rows of samples that stopped.
    const auto rows =
        chained && ahead_->greedy == greedy ? chain_match(ahead_->rows, ahead_->fed, batch, draws) : std::nullopt;
    if (rows) {
      const ChainStep step = std::move(*ahead_);
      ahead_.reset();
      std::vector<bool> kept(step.rows.size(), false);
      for (int64_t r : *rows) kept[static_cast<size_t>(r)] = true;
      for (size_t r = 0; r < step.rows.size(); ++r) {
        if (!kept[r]) take_back_position(step.rows[r].seq);  // (a stopped sample's)
      }
      KLLM_RETURN_IF_ERROR(launch_ahead(batch, draws, *rows, step.greedy, greedy));
      return read_chain_step(step.buf, *rows, draws, tokens);
    }
    KLLM_RETURN_IF_ERROR(cancel_ahead());
  }
  if (chained) {
    KLLM_RETURN_IF_ERROR(validate(batch));
    std::vector<int32_t> fed(batch.size());
    std::vector<int64_t> rows(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      fed[i] = batch[i].tokens[0];
      rows[i] = static_cast<int64_t>(i);
    }
    const int buf = chain_buf_;
    chain_buf_ ^= 1;
    KLLM_RETURN_IF_ERROR(launch_chain_step(chain_rows(batch, draws), fed.data(), {}, false, greedy, buf));
    KLLM_RETURN_IF_ERROR(launch_ahead(batch, draws, rows, greedy, greedy));
    return read_chain_step(buf, rows, draws, tokens);
  }
  if (greedy) {
    std::vector<int32_t> ids;
    KLLM_RETURN_IF_ERROR(forward_argmax(batch, ids));
    tokens.resize(draws.size());
    for (size_t i = 0; i < draws.size(); ++i) tokens[i] = ids[static_cast<size_t>(draws[i].row)];
    return Status::ok_status();
  }
  if (!plan_->device_sampling() || config_.vocab_size > sample_block::kMaxVocab) {
    return Backend::forward_sample(batch, draws, tokens);
  }
  KLLM_RETURN_IF_ERROR(reserve_draws(draws.size()));
  draw_order_.resize(draws.size());
  for (size_t i = 0; i < draws.size(); ++i) draw_order_[i] = i;
  std::stable_sort(draw_order_.begin(), draw_order_.end(),
                   [&](size_t a, size_t b) { return draws[a].row < draws[b].row; });
  draws_ = draws.data();
  const Status s = forward_rows(batch, nullptr, nullptr);
  draws_ = nullptr;
  KLLM_RETURN_IF_ERROR(s);
  tokens.resize(draws.size());
  for (size_t j = 0; j < draws.size(); ++j) tokens[draw_order_[j]] = draw_ids_host_[j];
  return Status::ok_status();
}

Status CudaBackend::copy_pages(std::span<const KvPages::Copy> copies) {
  const size_t page_bytes = static_cast<size_t>(config_.num_hidden_layers * 2 * opts_.kv_page_tokens * kv_dim_) *
                            dtype_size(dtype_);
  for (const KvPages::Copy& cp : copies) {
    KLLM_CUDA_RETURN(cudaMemcpyAsync(kv_pool_.as<char>() + static_cast<size_t>(cp.dst) * page_bytes,
                                     kv_pool_.as<char>() + static_cast<size_t>(cp.src) * page_bytes, page_bytes,
                                     cudaMemcpyDeviceToDevice, stream_),
                     "copy-on-write of a KV page");
  }
  return Status::ok_status();
}

bool CudaBackend::plan_shared_pass(int64_t n, int32_t* m) const {
  const int64_t group = config_.num_attention_heads / config_.num_key_value_heads;
  if (n < 2 || !plan_->cascade_possible() || prefix_splits_for(n) <= 0) {
    return false;
  }
  std::vector<const std::vector<int32_t>*> tok_pages;
  std::vector<int32_t> tok_pos(m + max_tokens_, m + max_tokens_ + n), tok_seq(m + 2 * max_tokens_, m + 2 * max_tokens_ + n);
  for (int32_t s : tok_seq) tok_pages.push_back(&pages_->pages(s));
  SharedPrefixPlan plan;
  plan_shared_prefix(tok_pages, tok_pos, tok_seq, opts_.kv_page_tokens, group, plan);
  if (plan.shared) {
    const std::vector<int32_t>* fields[] = {&plan.ctx_begin,  &plan.item_seq,   &plan.item_prefix,
                                            &plan.item_first, &plan.item_count, &plan.members};
    for (size_t f = 0; f < 6; ++f) std::copy(fields[f]->begin(), fields[f]->end(), m + (7 + f) * max_tokens_);
  }
  return plan.shared;
}

Status CudaBackend::launch_chain_step(std::span<const ChainRow> rows, const int32_t* tokens,
                                      std::span<const int64_t> from_rows, bool from_greedy, bool greedy, int buf) {
  const auto n = static_cast<int64_t>(rows.size());
  // Every row's position first (extend cannot fail): a step once asked for holds all of them,
  // so that cancel_ahead takes it back whole.
  std::vector<KvPages::Copy> copies;
  std::vector<int64_t> changed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) changed[static_cast<size_t>(i)] = pages_->extend(rows[static_cast<size_t>(i)].seq, 1, copies);
  // The set's last step was read before the step in flight was launched: done, but to be sure.
  KLLM_CUDA_RETURN(cudaEventSynchronize(chain_done_[buf]), "a decode step");
  int32_t* m = meta_host_ + static_cast<size_t>(buf) * static_cast<size_t>(kMetaFields * max_tokens_);
  int32_t* patches = chain_patches_host_[buf];
  int64_t n_patches = 0;  // (one token more changes at most one page of a sequence)
  for (int64_t i = 0; i < n; ++i) {
    const SeqId s = rows[static_cast<size_t>(i)].seq;
    const int64_t pos = pages_->length(s) - 1;
    const std::vector<int32_t>& pages = pages_->pages(s);
    for (auto p = static_cast<size_t>(changed[static_cast<size_t>(i)]); p < pages.size(); ++p) {
      patches[2 * n_patches] = static_cast<int32_t>(s * table_width_ + static_cast<int64_t>(p));
      patches[2 * n_patches++ + 1] = pages[p];
    }
    m[i] = tokens != nullptr ? tokens[i] : 0;
    m[max_tokens_ + i] = static_cast<int32_t>(pos);
    m[2 * max_tokens_ + i] = s;
    m[3 * max_tokens_ + i] = pages[static_cast<size_t>(pos / opts_.kv_page_tokens)];
    m[4 * max_tokens_ + i] = static_cast<int32_t>(i);  // out row
    m[5 * max_tokens_ + i] = static_cast<int32_t>(i);  // query block start
    m[6 * max_tokens_ + i] = 1;                        // and length
    m[kMetaChainFrom * max_tokens_ + i] =
        from_rows.empty() ? 0 : static_cast<int32_t>(from_rows[static_cast<size_t>(i)]);
  }
  KLLM_RETURN_IF_ERROR(copy_pages(copies));
  ChainPrep prep;
  prep.host_meta = m;
  prep.meta = meta_.as<int32_t>();
  prep.pitch = max_tokens_;
  prep.fields = kMetaFields;
  prep.n = n;
  prep.patches = patches;
  prep.n_patches = n_patches;
  prep.table = block_table_.as<int32_t>();
  prep.from_field = kMetaChainFrom;
  if (!from_rows.empty()) prep.drawn = from_greedy ? ids_dev_.as<int32_t>() : draw_ids_dev_.as<int32_t>();
  // The step whose ids feed this one is the last one launched: its ids go to the host now.
  const std::optional<Unpublished> publish = std::exchange(pending_publish_, std::nullopt);
  if (publish) {
    prep.publish_from = publish->ids;
    prep.publish = chain_ids_host_[publish->buf];
    prep.n_publish = publish->n;
  }
  const bool shared = plan_shared_pass(n, m);
  chain_prep(prep, stream_);
  if (publish) KLLM_CUDA_RETURN(cudaEventRecord(chain_done_[publish->buf], stream_), "a decode step's event");
  KLLM_RETURN_IF_ERROR(launch_decode_layers(n, shared));
  const int32_t* drawn = nullptr;
  if (greedy) {
    // Outside the graph, so that chain_prep (the next step's) launches early from it.
    argmax_rows(logits_dev_.as<float>(), n, config_.vocab_size, ids_dev_.as<int32_t>(),
                cluster_blocks_per_row(plan_->feature_major(), sm_count_, n, kArgmaxBlocksPerSm), stream_);
    drawn = ids_dev_.as<int32_t>();
  } else {
    sample_block::Draw* d = chain_draws_host_[buf];
    for (int64_t i = 0; i < n; ++i) d[i] = device_draw(rows[static_cast<size_t>(i)].draw, i);
    KLLM_CUDA_RETURN(cudaMemcpyAsync(draws_dev_.get(), d, static_cast<size_t>(n) * sizeof(sample_block::Draw),
                                     cudaMemcpyHostToDevice, stream_),
                     "draws upload");
    sample_rows(logits_dev_.as<float>(), config_.vocab_size, draws_dev_.as<sample_block::Draw>(), n,
                draw_ids_dev_.as<int32_t>(), cluster_blocks_per_row(plan_->feature_major(), sm_count_, n), stream_);
    drawn = draw_ids_dev_.as<int32_t>();
  }
  pending_publish_ = Unpublished{buf, n, drawn};
  return cuda_status(cudaGetLastError(), "launching a decode step");
}

Status CudaBackend::launch_ahead(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                                 std::span<const int64_t> from_rows, bool from_greedy, bool greedy) {
  std::vector<ChainRow> next = chain_next(batch, draws);
  int64_t pages_needed = 0;
  for (const ChainRow& r : next) {
    if (pages_->length(r.seq) >= config_.max_position_embeddings) return Status::ok_status();
    pages_needed += pages_->pages_needed(r.seq, 1);
  }
  if (pages_needed > pages_->free_pages()) return Status::ok_status();
  const int buf = chain_buf_;
  chain_buf_ ^= 1;
  const Status s = launch_chain_step(next, nullptr, from_rows, from_greedy, greedy, buf);
  ahead_ = ChainStep{std::move(next), {}, greedy, buf};  // (its positions are taken even if the launch failed)
  return s;
}

Status CudaBackend::read_chain_step(int buf, std::span<const int64_t> rows, std::span<const RowDraw> draws,
                                    std::vector<int32_t>& tokens) {
  if (pending_publish_ && pending_publish_->buf == buf) {  // no step follows it: copy its ids
    KLLM_CUDA_RETURN(cudaMemcpyAsync(chain_ids_host_[buf], pending_publish_->ids,
                                     static_cast<size_t>(pending_publish_->n) * 4, cudaMemcpyDeviceToHost, stream_),
                     "drawn ids download");
    KLLM_CUDA_RETURN(cudaEventRecord(chain_done_[buf], stream_), "a decode step's event");
    pending_publish_.reset();
  }
  KLLM_CUDA_RETURN(cudaEventSynchronize(chain_done_[buf]), "a decode step");
  const int32_t* ids = chain_ids_host_[buf];
  tokens.resize(draws.size());
  for (size_t j = 0; j < draws.size(); ++j) tokens[j] = ids[rows[static_cast<size_t>(draws[j].row)]];
  if (ahead_) {
    ahead_->fed.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) ahead_->fed[i] = ids[rows[i]];
  }
  return Status::ok_status();
}

Status CudaBackend::cancel_ahead() {
  if (!ahead_) return Status::ok_status();
  const cudaError_t e = cudaStreamSynchronize(stream_);
  for (const ChainRow& r : ahead_->rows) take_back_position(r.seq);
  ahead_.reset();
  pending_publish_.reset();  // (the ids of the step taken back)
  return cuda_status(e, "a decode step launched ahead");
}

void CudaBackend::take_back_position(SeqId seq) {
  if (seq >= 0) pages_->truncate(seq, pages_->length(seq) - 1);
}

sample_block::Draw CudaBackend::device_draw(const RowDraw& d, int64_t row) const {
  return sample_block::Draw{row, d.params.temperature, d.params.top_p, d.params.top_k, d.params.seed,
                            d.index, d.step, 0};
}

Status CudaBackend::forward_rows(std::span<const ForwardRequest> batch, std::vector<float>* logits,
                                 std::vector<int32_t>* ids) {
  KLLM_RETURN_IF_ERROR(validate(batch));
  struct Tok {
    int32_t id, pos, seq, page;
    bool out;
  };
  std::vector<Tok> toks;
  std::vector<KvPages::Copy> copies;
  bool single_token = true;
  for (const ForwardRequest& req : batch) {
    const int64_t start = pages_->length(req.seq);
    const auto n = static_cast<int64_t>(req.tokens.size());
    single_token = single_token && n == 1;
    const int64_t first_changed = pages_->extend(req.seq, n, copies);
    KLLM_RETURN_IF_ERROR(upload_table(req.seq, first_changed));
    const std::vector<int32_t>& pages = pages_->pages(req.seq);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = start + i;
      toks.push_back({req.tokens[static_cast<size_t>(i)], static_cast<int32_t>(p), req.seq,
                      pages[static_cast<size_t>(p / opts_.kv_page_tokens)], req.all_logits || i == n - 1});
    }
  }
  KLLM_RETURN_IF_ERROR(copy_pages(copies));
  int64_t total_rows = 0;
  for (const Tok& t : toks) total_rows += t.out ? 1 : 0;
  if (ids != nullptr) ids->resize(static_cast<size_t>(total_rows));
  if (logits != nullptr) logits->resize(static_cast<size_t>(total_rows * config_.vocab_size));

  int64_t done_rows = 0;
  for (size_t t0 = 0; t0 < toks.size(); t0 += static_cast<size_t>(max_tokens_)) {
    const size_t t1 = std::min(toks.size(), t0 + static_cast<size_t>(max_tokens_));
    int32_t* m = meta_host_;
    int64_t r = 0, blocks = 0;
    for (size_t t = t0; t < t1; ++t) {
      const auto i = static_cast<int64_t>(t - t0);
      m[i] = toks[t].id;
      m[max_tokens_ + i] = toks[t].pos;
      m[2 * max_tokens_ + i] = toks[t].seq;
      m[3 * max_tokens_ + i] = toks[t].page;
      if (toks[t].out) m[4 * max_tokens_ + r++] = static_cast<int32_t>(i);
      // Query blocks: runs of up to kPrefillQueryBlock consecutive tokens of one sequence.
      int32_t* len = m + 6 * max_tokens_;
      if (blocks > 0 && toks[t].seq == toks[t - 1].seq && len[blocks - 1] < kPrefillQueryBlock) {
        ++len[blocks - 1];
      } else {
        m[5 * max_tokens_ + blocks] = static_cast<int32_t>(i);
        len[blocks++] = 1;
      }
    }
    const auto n = static_cast<int64_t>(t1 - t0);
    const bool shared = single_token && plan_shared_pass(n, m);
    float* logits_out = logits != nullptr ? logits->data() + done_rows * config_.vocab_size : nullptr;
    int32_t* ids_out = ids != nullptr ? ids->data() + done_rows : nullptr;
    draw_row0_ = done_rows;
    KLLM_RETURN_IF_ERROR(run_chunk(n, r, blocks, single_token, shared, logits_out, ids_out));
    done_rows += r;
  }
  return Status::ok_status();
}

namespace {
Status check_config(const ModelConfig& c, const CudaBackendOptions& o) {
  auto bad = [](const std::string& what) { return error(ErrorCode::unsupported, "cuda backend: " + what); };
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 || c.vocab_size <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 || c.max_position_embeddings <= 0) {
    return bad("expected positive sizes in the model config");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) return bad("expected heads to be a multiple of kv heads");
  if (c.num_attention_heads / c.num_key_value_heads > kMaxAttentionGroup) {
    return bad("expected at most " + std::to_string(kMaxAttentionGroup) + " query heads per KV head");
  }
  if (c.head_dim % 8 != 0 || c.head_dim > kMaxAttentionHeadDim) {
    return bad("expected a head_dim that is a multiple of 8 and <= " + std::to_string(kMaxAttentionHeadDim) + ", found " +
               std::to_string(c.head_dim));
  }
  if (c.attention_bias || c.mlp_bias) return bad("attention_bias / mlp_bias are not supported");
  if (c.hidden_act != "silu") return bad("expected hidden_act silu, found " + c.hidden_act);
  if (!is_compute_dtype(o.dtype)) {
    return bad("expected dtype BF16, F16 or F32, found " + std::string(dtype_name(o.dtype)));
  }
  if (o.kv_page_tokens <= 0 || o.max_sequences <= 0 || o.max_batch_tokens <= 0 || o.kv_capacity_tokens < 0) {
    return error(ErrorCode::invalid_argument,
                 "cuda backend: expected kv_page_tokens, max_sequences, max_batch_tokens > 0 and kv_capacity_tokens >= 0");
  }
  if (!(o.memory_fraction >= 0.0 && o.memory_fraction <= 1.0)) {
    return error(ErrorCode::invalid_argument,
                 "cuda backend: expected a memory fraction in [0, 1] (0: all free memory), found " +
                     std::to_string(o.memory_fraction));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= o.device || o.device < 0) {
    cudaGetLastError();
    return error(ErrorCode::not_found, "cuda backend: expected a CUDA device " + std::to_string(o.device) +
                                           ", found " + std::to_string(count) + " device(s)");
  }
  return Status::ok_status();
}
}  // namespace
}  // namespace cuda

bool cuda_backend_built() { return true; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const ModelConfig& config, const WeightStore& weights,
                                                    const CudaBackendOptions& options) {
  KLLM_RETURN_IF_ERROR(cuda::check_config(config, options));
  auto b = std::make_unique<cuda::CudaBackend>(config, options);
  KLLM_RETURN_IF_ERROR(b->init());
  KLLM_RETURN_IF_ERROR(b->load(weights).with_context("cuda backend: loading weights"));
  KLLM_RETURN_IF_ERROR(b->init_kv());
  return std::unique_ptr<Backend>(std::move(b));
}

Result<std::unique_ptr<Backend>> make_cuda_backend_random(const ModelConfig& config, uint64_t seed,
                                                           const CudaBackendOptions& options) {
  KLLM_RETURN_IF_ERROR(cuda::check_config(config, options));
  auto b = std::make_unique<cuda::CudaBackend>(config, options);
  KLLM_RETURN_IF_ERROR(b->init());
  KLLM_RETURN_IF_ERROR(b->randomize(seed));
  KLLM_RETURN_IF_ERROR(b->init_kv());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace kernelllm
