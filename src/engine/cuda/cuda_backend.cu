// The CUDA backend: see cuda_backend.h. Per layer: RMSNorm -> fused q|k|v projection -> RoPE +
// KV write -> paged attention -> o_proj -> residual add + RMSNorm -> fused gate|up projection
// -> SwiGLU -> down_proj. The residual stream and projection outputs are fp32; matmul inputs,
// weights and the KV cache are in the backend dtype.
#include "engine/cuda/backend_impl.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_set>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/embedding.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/init.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/rmsnorm.cuh"
#include "engine/cuda/rope.cuh"
#include "engine/cuda/sample.cuh"
#include "engine/cuda/skinny_gemm.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm::cuda {
namespace {
constexpr int64_t kMaxSplits = 16;
static_assert(kMaxSplits + kSharedPrefixSplits <= kMaxAttentionSplits, "split slots of a decode pass");
}  // namespace

CudaBackend::CudaBackend(const ModelConfig& config, const CudaBackendOptions& options)
    : config_(config),
      opts_(options),
      dtype_(options.dtype),
      q_dim_(config.num_attention_heads * config.head_dim),
      kv_dim_(config.num_key_value_heads * config.head_dim),
      table_width_((config.max_position_embeddings + options.kv_page_tokens - 1) / options.kv_page_tokens),
      max_tokens_(options.max_batch_tokens),
      max_logit_rows_(std::min<int64_t>(options.max_batch_tokens, 256)) {
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // a decode step launched ahead
  for (auto& [n, g] : graphs_) cudaGraphExecDestroy(g);
  for (int b = 0; b < 2; ++b) {
    if (chain_done_[b] != nullptr) cudaEventDestroy(chain_done_[b]);
    if (chain_draws_host_[b] != nullptr) cudaFreeHost(chain_draws_host_[b]);
    if (chain_ids_host_[b] != nullptr) cudaFreeHost(chain_ids_host_[b]);
    if (chain_patches_host_[b] != nullptr) cudaFreeHost(chain_patches_host_[b]);
  }
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (draws_host_ != nullptr) cudaFreeHost(draws_host_);
  if (draw_ids_host_ != nullptr) cudaFreeHost(draw_ids_host_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackend::init() {
  const ModelConfig& c = config_;
  KLLM_CUDA_RETURN(cudaSetDevice(opts_.device), "selecting device " + std::to_string(opts_.device));
  KLLM_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
  // The kernel plan: the caller's plan text, else KERNELLLM_CUDA_PLAN, for this GPU.
  GpuTraits gpu;
  int smem = 0;
  KLLM_CUDA_RETURN(cudaDeviceGetAttribute(&gpu.major, cudaDevAttrComputeCapabilityMajor, opts_.device),
                   "querying the compute capability");
  KLLM_CUDA_RETURN(cudaDeviceGetAttribute(&gpu.minor, cudaDevAttrComputeCapabilityMinor, opts_.device),
                   "querying the compute capability");
  KLLM_CUDA_RETURN(cudaDeviceGetAttribute(&gpu.sm_count, cudaDevAttrMultiProcessorCount, opts_.device),
                   "querying the SM count");
  KLLM_CUDA_RETURN(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, opts_.device),
                   "querying shared memory per block");
  gpu.smem_per_block = smem;
  sm_count_ = gpu.sm_count;
  KLLM_ASSIGN_OR_RETURN(const PlanChoices choices, plan_choices(opts_.plan));
  plan_.emplace(c, dtype_, gpu, choices);
  // Programmatic dependent launch (launch.cuh) and the weights' L2 evict-first policy
  // (common.cuh's weights_evict_first) are process-wide: the last backend made sets them.
  set_programmatic_launch(plan_->pdl());
  set_weights_evict_first(plan_->weights_evict_first());
  size_t total_b = 0;
  KLLM_CUDA_RETURN(cudaMemGetInfo(&free_at_start_, &total_b), "querying free memory");
  KLLM_RETURN_IF_ERROR(gemm_.init(dtype_, plan_->lt_tuned()));
  const size_t es = dtype_size(dtype_);
  const auto h = static_cast<size_t>(c.hidden_size), inter = static_cast<size_t>(c.intermediate_size);
  const auto vocab = static_cast<size_t>(c.vocab_size);
  const auto qd = static_cast<size_t>(q_dim_), kd = static_cast<size_t>(kv_dim_);
  KLLM_RETURN_IF_ERROR(embed_.allocate(vocab * h * es, "embed_tokens"));
  if (!c.tie_word_embeddings) KLLM_RETURN_IF_ERROR(lm_head_.allocate(vocab * h * es, "lm_head"));
  KLLM_RETURN_IF_ERROR(final_norm_.allocate(h * 4, "norm"));
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (Layer& l : layers_) {
    KLLM_RETURN_IF_ERROR(l.qkv.allocate((qd + 2 * kd) * h * es, "qkv_proj"));
    KLLM_RETURN_IF_ERROR(l.o.allocate(h * qd * es, "o_proj"));
    KLLM_RETURN_IF_ERROR(l.gate_up.allocate(2 * inter * h * es, "gate_up_proj"));
    KLLM_RETURN_IF_ERROR(l.down.allocate(h * inter * es, "down_proj"));
    KLLM_RETURN_IF_ERROR(l.in_norm.allocate(h * 4, "input_layernorm"));
    KLLM_RETURN_IF_ERROR(l.post_norm.allocate(h * 4, "post_attention_layernorm"));
  }
  const std::vector<float> inv = rope_inv_freq(c);
  KLLM_RETURN_IF_ERROR(inv_freq_.allocate(inv.size() * 4, "rope inv_freq"));
  // Every copy and memset goes on stream_: it is non-blocking, so the legacy stream's cudaMemcpy
  // and cudaMemset are not ordered before its kernels, and a copy from pageable memory may return
  // before its DMA lands (seen as wrong logits when other processes shared the GPU).
  KLLM_CUDA_RETURN(cudaMemcpyAsync(inv_freq_.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice, stream_),
                   "inv_freq");
  KLLM_CUDA_RETURN(cudaStreamSynchronize(stream_), "inv_freq");  // (inv is freed on return)

  const auto T = static_cast<size_t>(max_tokens_);
  KLLM_RETURN_IF_ERROR(x_.allocate(T * h * 4, "residual"));
  KLLM_RETURN_IF_ERROR(xn_.allocate(T * std::max(h, inter) * es, "normed"));
  KLLM_RETURN_IF_ERROR(qkv_.allocate(T * (qd + 2 * kd) * 4, "qkv"));
  KLLM_RETURN_IF_ERROR(q_.allocate(T * qd * 4, "q"));
  KLLM_RETURN_IF_ERROR(att_.allocate(T * qd * es, "attention out"));
  KLLM_RETURN_IF_ERROR(proj_.allocate(T * h * 4, "projection out"));
  KLLM_RETURN_IF_ERROR(gate_up_.allocate(T * 2 * inter * 4, "gate_up"));
  KLLM_RETURN_IF_ERROR(act_.allocate(T * inter * es, "mlp act"));
  KLLM_RETURN_IF_ERROR(part_acc_.allocate(T * qd * 4, "attention partials"));
  KLLM_RETURN_IF_ERROR(part_ml_.allocate(T * static_cast<size_t>(c.num_attention_heads) * 2 * 4, "attention stats"));
  const auto R = static_cast<size_t>(max_logit_rows_);
  KLLM_RETURN_IF_ERROR(fin_.allocate(R * h * es, "final norm rows"));
  KLLM_RETURN_IF_ERROR(logits_dev_.allocate(R * vocab * 4, "logits"));
  KLLM_RETURN_IF_ERROR(ids_dev_.allocate(R * 4, "greedy ids"));
  KLLM_RETURN_IF_ERROR(meta_.allocate(T * kMetaFields * 4, "batch metadata"));
  KLLM_CUDA_RETURN(cudaMallocHost(&meta_host_, 2 * T * kMetaFields * 4), "pinned metadata");
  // The decode chain's steps (at most max_logit_rows_ rows): two buffer sets, the device draws'
  // room reserved now so that it never moves under a step in flight.
  for (int b = 0; b < 2; ++b) {
    KLLM_CUDA_RETURN(cudaMallocHost(&chain_draws_host_[b], R * sizeof(sample_block::Draw)), "pinned chain draws");
    KLLM_CUDA_RETURN(cudaMallocHost(&chain_ids_host_[b], R * 4), "pinned chain ids");
    KLLM_CUDA_RETURN(cudaMallocHost(&chain_patches_host_[b], 2 * R * 4), "pinned chain page-table patches");
    KLLM_CUDA_RETURN(cudaEventCreateWithFlags(&chain_done_[b], cudaEventDisableTiming), "chain event");
  }
  KLLM_RETURN_IF_ERROR(reserve_draws(R));
  if (plan_->band_parts_possible()) {
    const auto rows = std::min<size_t>(T, static_cast<size_t>(kBandMaxTokens)) * std::max(qd + 2 * kd, h);
    KLLM_RETURN_IF_ERROR(band_parts_.allocate(static_cast<size_t>(kBandMaxParts) * rows * 4, "band gemm parts"));
  }
  if (plan_->staged_possible()) {
    const int64_t widest = std::max({c.vocab_size, 2 * c.intermediate_size, q_dim_ + 2 * kv_dim_, c.hidden_size});
    const auto counters = static_cast<size_t>(staged_counter_count(widest)) * 4;
    KLLM_RETURN_IF_ERROR(staged_partials_.allocate(static_cast<size_t>(staged_partial_floats(sm_count_)) * 4,
                                                   "staged gemm partial sums"));
    KLLM_RETURN_IF_ERROR(staged_counters_.allocate(counters, "staged gemm counters"));
    KLLM_CUDA_RETURN(cudaMemsetAsync(staged_counters_.get(), 0, counters, stream_),
                     "clearing the staged gemm counters");
  }
  return Status::ok_status();
}

Status CudaBackend::load(const WeightStore& store) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  DeviceBuffer staging;
  // Uploads `name` (checked to be [rows, cols]) into dst at element offset `at`, converted.
  auto put = [&](const std::string& name, std::vector<int64_t> shape, void* dst, int64_t at, DType dst_type) -> Status {
    KLLM_ASSIGN_OR_RETURN(TensorView t, store.get_float(name, shape));
    if (staging.bytes() < t.data.size()) KLLM_RETURN_IF_ERROR(staging.allocate(t.data.size(), "upload staging"));
    KLLM_CUDA_RETURN(cudaMemcpyAsync(staging.get(), t.data.data(), t.data.size(), cudaMemcpyHostToDevice, stream_),
                     "upload " + name);
    convert(dst_type, static_cast<char*>(dst) + static_cast<size_t>(at) * dtype_size(dst_type), t.dtype,
            staging.get(), t.numel(), stream_);
    KLLM_CUDA_RETURN(cudaStreamSynchronize(stream_), "convert " + name);
    return Status::ok_status();
  };
  KLLM_RETURN_IF_ERROR(put("model.embed_tokens.weight", {c.vocab_size, h}, embed_.get(), 0, dtype_));
  if (!c.tie_word_embeddings) KLLM_RETURN_IF_ERROR(put("lm_head.weight", {c.vocab_size, h}, lm_head_.get(), 0, dtype_));
  KLLM_RETURN_IF_ERROR(put("model.norm.weight", {h}, final_norm_.get(), 0, DType::f32));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& l = layers_[static_cast<size_t>(i)];
    KLLM_RETURN_IF_ERROR(put(p + "input_layernorm.weight", {h}, l.in_norm.get(), 0, DType::f32));
    KLLM_RETURN_IF_ERROR(put(p + "post_attention_layernorm.weight", {h}, l.post_norm.get(), 0, DType::f32));
    KLLM_RETURN_IF_ERROR(put(p + "self_attn.q_proj.weight", {q_dim_, h}, l.qkv.get(), 0, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "self_attn.k_proj.weight", {kv_dim_, h}, l.qkv.get(), q_dim_ * h, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "self_attn.v_proj.weight", {kv_dim_, h}, l.qkv.get(), (q_dim_ + kv_dim_) * h, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "self_attn.o_proj.weight", {h, q_dim_}, l.o.get(), 0, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "mlp.gate_proj.weight", {inter, h}, l.gate_up.get(), 0, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "mlp.up_proj.weight", {inter, h}, l.gate_up.get(), inter * h, dtype_));
    KLLM_RETURN_IF_ERROR(put(p + "mlp.down_proj.weight", {h, inter}, l.down.get(), 0, dtype_));
  }
  return Status::ok_status();
}

Status CudaBackend::randomize(uint64_t seed) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  uint64_t k = seed * 1000003ull;
  auto rnd = [&](DeviceBuffer& b, int64_t n) { fill_random(dtype_, b.get(), n, ++k, 0.02f, stream_); };
  auto one = [&](DeviceBuffer& b) { fill_value(DType::f32, b.get(), h, 1.0f, stream_); };
  rnd(embed_, c.vocab_size * h);
  if (!c.tie_word_embeddings) rnd(lm_head_, c.vocab_size * h);
  one(final_norm_);
  for (Layer& l : layers_) {
    rnd(l.qkv, (q_dim_ + 2 * kv_dim_) * h);
    rnd(l.o, h * q_dim_);
    rnd(l.gate_up, 2 * inter * h);
    rnd(l.down, h * inter);
    one(l.in_norm);
    one(l.post_norm);
  }
  KLLM_CUDA_RETURN(cudaGetLastError(), "random weights");
  KLLM_CUDA_RETURN(cudaStreamSynchronize(stream_), "random weights");
  return Status::ok_status();
}

Status CudaBackend::init_kv() {
  const size_t page_bytes = static_cast<size_t>(config_.num_hidden_layers * 2 * opts_.kv_page_tokens * kv_dim_) *
                            dtype_size(dtype_);
  int64_t num_pages = 0;
  if (opts_.kv_capacity_tokens > 0) {
    num_pages = (opts_.kv_capacity_tokens + opts_.kv_page_tokens - 1) / opts_.kv_page_tokens;
  } else {
    size_t free_b = 0, total_b = 0;
    KLLM_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b), "querying free memory");
    const size_t reserve = size_t{3} << 29;  // 1.5 GiB for cuBLASLt, graphs and the runtime
    size_t budget = free_b > reserve ? free_b - reserve : 0;
    std::string limit = std::to_string(free_b >> 20) + " MiB free after the weights";
    if (opts_.memory_fraction > 0.0) {
      // What this process took so far: the context (estimated at 0.5 GiB: it existed before the
      // first query), weights and workspaces. Other processes' usage is not ours to count.
      const size_t context = size_t{1} << 29;
      const size_t used = context + (free_at_start_ > free_b ? free_at_start_ - free_b : 0);
      const auto allowed = static_cast<size_t>(opts_.memory_fraction * static_cast<double>(total_b));
      budget = std::min(budget, allowed > used + reserve ? allowed - used - reserve : 0);
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%.2f", opts_.memory_fraction);
      limit += ", " + std::to_string(used >> 20) + " MiB used by this engine of " + std::to_string(allowed >> 20) +
               " MiB allowed by memory fraction " + fraction;
    }
    num_pages = static_cast<int64_t>(budget / page_bytes);
    if (num_pages < 1) {
      return error(ErrorCode::resource_exhausted, "cuda backend: no device memory left for the KV cache (" + limit + ")");
    }
  }
  KLLM_RETURN_IF_ERROR(kv_pool_.allocate(static_cast<size_t>(num_pages) * page_bytes,
                                         "KV cache of " + std::to_string(num_pages * opts_.kv_page_tokens) + " tokens"));
  KLLM_RETURN_IF_ERROR(block_table_.allocate(static_cast<size_t>(opts_.max_sequences * table_width_) * 4, "block table"));
  pages_ = std::make_unique<KvPages>(num_pages, opts_.kv_page_tokens, opts_.max_sequences);
  return Status::ok_status();
}

Result<SeqId> CudaBackend::fork_sequence(SeqId parent) {
  // A fork copies the parent's pages and length: not a position launched ahead.
  if (ahead_holds(parent)) KLLM_RETURN_IF_ERROR(cancel_ahead());
  KLLM_ASSIGN_OR_RETURN(SeqId id, pages_->fork(parent));
  const std::vector<int32_t>& pages = pages_->pages(id);
  if (!pages.empty()) {
    KLLM_CUDA_RETURN(cudaMemcpyAsync(block_table_.as<int32_t>() + static_cast<int64_t>(id) * table_width_,
                                     block_table_.as<int32_t>() + static_cast<int64_t>(parent) * table_width_,
                                     pages.size() * 4, cudaMemcpyDeviceToDevice, stream_),
                     "fork block table");
  }
  return id;
}

void CudaBackend::release_sequence(SeqId seq) {
  // A step launched ahead may still write the sequence's last position: the pages go back to
  // the pool now, and any later use of them is queued on the same stream after that step.
  if (ahead_) {
    for (ChainRow& r : ahead_->rows) {
      if (r.seq == seq) r.seq = -1;
    }
  }
  pages_->release(seq);
}

int64_t CudaBackend::sequence_length(SeqId seq) const {
  const int64_t n = pages_->length(seq);
  return n > 0 && ahead_holds(seq) ? n - 1 : n;
}

bool CudaBackend::ahead_holds(SeqId seq) const {
  return ahead_ && std::any_of(ahead_->rows.begin(), ahead_->rows.end(), [&](const ChainRow& r) { return r.seq == seq; });
}

Status CudaBackend::upload_table(SeqId seq, int64_t first_page) {
  const std::vector<int32_t>& pages = pages_->pages(seq);
  const auto n = static_cast<int64_t>(pages.size()) - first_page;
  if (n <= 0) return Status::ok_status();
  return cuda_status(cudaMemcpyAsync(block_table_.as<int32_t>() + static_cast<int64_t>(seq) * table_width_ + first_page,
                                     pages.data() + first_page, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice,
                                     stream_),
                     "block table upload");
}

Status CudaBackend::validate(std::span<const ForwardRequest> batch) const {
  std::unordered_set<SeqId> seen;
  int64_t pages_needed = 0;
  for (size_t r = 0; r < batch.size(); ++r) {
    const ForwardRequest& req = batch[r];
    const std::string where = "forward request " + std::to_string(r) + ": ";
    if (!pages_->contains(req.seq)) return error(ErrorCode::not_found, where + "unknown sequence " + std::to_string(req.seq));
    if (!seen.insert(req.seq).second) {
      return error(ErrorCode::invalid_argument, where + "sequence " + std::to_string(req.seq) + " appears twice");
    }
    if (req.tokens.empty()) return error(ErrorCode::invalid_argument, where + "expected >= 1 token, found none");
    for (int32_t id : req.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        return error(ErrorCode::out_of_range, where + "expected token ids in [0, " + std::to_string(config_.vocab_size) +
                                                  "), found " + std::to_string(id));
      }
    }
    const auto n = static_cast<int64_t>(req.tokens.size());
    const int64_t end = pages_->length(req.seq) + n;
    if (end > config_.max_position_embeddings) {
      return error(ErrorCode::out_of_range, where + "expected positions < max_position_embeddings (" +
                                                std::to_string(config_.max_position_embeddings) + "), found up to " +
                                                std::to_string(end - 1));
    }
    pages_needed += pages_->pages_needed(req.seq, n);
  }
  if (pages_needed > pages_->free_pages()) {
    return error(ErrorCode::resource_exhausted,
                 "cuda KV cache: the batch needs " + std::to_string(pages_needed) + " free pages of " +
                     std::to_string(pages_->page_tokens()) + " tokens, found " + std::to_string(pages_->free_pages()) +
                     " (capacity " + std::to_string(kv_capacity_tokens()) + " tokens)");
  }
  return Status::ok_status();
}

int64_t CudaBackend::splits_for(int64_t n) const {
  const int64_t blocks = n * config_.num_key_value_heads;
  const int64_t want = (4 * 132 + blocks - 1) / blocks;  // about four blocks per SM of an H100
  return std::clamp<int64_t>(want, 1, std::min<int64_t>(kMaxSplits, max_tokens_ / n));  // docs/cuda-engine.md
}

int64_t CudaBackend::prefix_splits_for(int64_t n) const {
  return std::clamp<int64_t>(max_tokens_ / n - splits_for(n), 0, kSharedPrefixSplits);
}

Status CudaBackend::proj(const ProjPlan& how, const DeviceBuffer& w, int64_t rows, int64_t cols, const void* x,
                         int64_t n, void* y, DType y_type, bool accumulate) {
  switch (how.kernel) {
    case ProjKernel::staged: {
      const StagedScratch scratch{staged_partials_.as<float>(), staged_counters_.as<int32_t>(), sm_count_};
      return staged_gemm_with_config(StagedConfig{}, dtype_, w.get(), rows, cols, x, n, y, y_type, accumulate,
                                     scratch, stream_);
    }
    case ProjKernel::band:
      return band_gemm(BandConfig{}, dtype_, w.get(), rows, cols, x, n, y, y_type, accumulate, sm_count_, stream_);
    case ProjKernel::skinny:
      skinny_gemm(dtype_, w.get(), rows, cols, x, n, y, y_type, accumulate, stream_);
      return Status::ok_status();
    case ProjKernel::gemv:
      if (y_type != DType::f32 || accumulate) {
        return error(ErrorCode::internal, "cuda backend: the GEMV writes a fresh fp32 output only");
      }
      gemv(dtype_, w.get(), rows, cols, x, n, static_cast<float*>(y), stream_);
      return Status::ok_status();
    case ProjKernel::band_parts:
      return error(ErrorCode::internal, "cuda backend: the band GEMM's parts form is launched by its caller");
    default:
      return gemm_.run(w.get(), rows, cols, x, n, y, y_type, stream_, accumulate);
  }
}

}  // namespace kernelllm::cuda
