// The CUDA backend class (internal): weights and KV cache on the device, the per-layer launch
// sequence, chunking of large forwards and CUDA graphs for decode steps. The public entry
// points are in include/kernelllm/engine/cuda_backend.h.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/common.cuh"
#include "engine/cuda/gemm.cuh"
#include "engine/cuda/staged_gemm.cuh"
#include "engine/cuda_plan.h"
#include "engine/decode_chain.h"
#include "engine/kv_pages.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/cuda_backend.h"

namespace kernelllm::sample_block {
struct Draw;
}  // namespace kernelllm::sample_block

namespace kernelllm::cuda {

inline constexpr int64_t kMetaFields = 14;
// The decode chain's field of them: each token's row in the step before, whose draw it is fed.
inline constexpr int64_t kMetaChainFrom = 13;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelConfig& config, const CudaBackendOptions& options);
  ~CudaBackend() override;

  // Allocates weights (uninitialized), activations and the Gemm; then one of the two fills.
  Status init();
  Status load(const WeightStore& store);
  Status randomize(uint64_t seed);
  // Allocates the KV pool (after the weights, so "most of free memory" means what is left).
  Status init_kv();

  std::string_view name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  Result<SeqId> create_sequence() override { return pages_->create(); }
  Result<SeqId> fork_sequence(SeqId parent) override;
  void release_sequence(SeqId seq) override;
  // The tokens the caller has fed (a step launched ahead is not counted).
  int64_t sequence_length(SeqId seq) const override;
  Status forward(std::span<const ForwardRequest> batch, std::vector<float>& logits) override;
  Status forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens) override;
  // Greedy-only draws: the device argmax. Others: on the device (sample.cuh) with the option
  // device_sampling, else forward() and the host's draws (Backend::forward_sample). Decode steps
  // with one draw per row go through the chain: the step after is launched (ahead_) before this
  // one's tokens are read.
  Status forward_sample(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                        std::vector<int32_t>& tokens) override;
  Status settle() override { return cancel_ahead(); }

  int64_t kv_capacity_tokens() const { return pages_->num_pages() * pages_->page_tokens(); }
  const KernelPlan& plan() const { return *plan_; }
  int64_t kv_free_tokens() const { return pages_->free_pages() * pages_->page_tokens(); }

 private:
  struct Layer {
    DeviceBuffer qkv, o, gate_up, down;  // dtype_ matrices, row-major [out, in]
    DeviceBuffer in_norm, post_norm;     // f32 [hidden]
  };
  Status validate(std::span<const ForwardRequest> batch) const;
  Status upload_table(SeqId seq, int64_t first_page);
  // y [n, rows] = x . W^T (y += with `accumulate`), y in `y_type`, by the kernel the plan chose
  // (not the band GEMM's parts form: its callers launch it). The GEMV writes a fresh f32 y only.
  Status proj(const ProjPlan& how, const DeviceBuffer& w, int64_t rows, int64_t cols, const void* x, int64_t n,
              void* y, DType y_type = DType::f32, bool accumulate = false);
  // The device work of one pass over n tokens whose metadata is in meta_, kernels as plan_->pass
  // says; with logits_in_pass
  // (single-token passes, where every token's row produces logits: r == n) also their logits.
  // q_blocks > 0: attention through the tensor-core prefill kernel over that many query blocks.
  // shared: decode attention through attention_shared.cuh with the plan in meta_ fields 7..12.
  // single_token: one new token per sequence (RoPE and the KV write then go with the attention).
  Status run_layers(int64_t n, int64_t r, int64_t q_blocks, bool logits_in_pass, bool shared, bool single_token);
  // The logits of the chunk's r rows go to logits_out ([r, vocab]) or, with ids_out, only
  // their argmax ([r]).
  Status run_chunk(int64_t n, int64_t r, int64_t q_blocks, bool single_token, bool shared, float* logits_out,
                   int32_t* ids_out);
  // Rows [r0, r0 + rn) of the pass from logits_dev_ (rows 0..rn-1 there) to the host: the
  // logits, or with ids_out their argmax only, or with neither the device draws of those rows.
  Status download_rows(int64_t rn, int64_t r0, float* logits_out, int32_t* ids_out);
  // forward(), forward_argmax() and forward_sample(): rows of logits, or of ids when `ids`, or
  // with neither the draws in draws_.
  Status forward_rows(std::span<const ForwardRequest> batch, std::vector<float>* logits, std::vector<int32_t>* ids);
  // The KV pages' copies-on-write that KvPages::extend asked for.
  Status copy_pages(std::span<const KvPages::Copy> copies);
  // A single-token pass of n tokens whose metadata m (pinned, fields of max_tokens_) has its pos
  // and seq fields: where forks share their prompt's pages, the cascade attention's plan into
  // fields 7..12 and true; else false.
  bool plan_shared_pass(int64_t n, int32_t* m) const;
  // The device work of a single-token pass of n tokens whose metadata is in meta_ (with logits):
  // its CUDA graph (captured on the second use of a batch size) or the kernels one by one.
  Status launch_decode_layers(int64_t n, bool shared);

  // Decode steps launched one ahead (decode_chain.h; the plan's chain choice). A
  // step of the chain uses one of two sets of pinned buffers (its metadata, page-table patches,
  // draws and ids); chain_done_[buf] is recorded once its ids are on the host: written there by
  // the next step's chain_prep kernel, or copied when no step follows (read_chain_step).
  struct ChainStep {
    std::vector<ChainRow> rows;
    std::vector<int32_t> fed;  // each row's input token, known once the step before is read
    bool greedy = true;
    int buf = 0;
  };
  // Queues a step of the chain: extends each row's sequence by one position; chain_prep puts
  // its metadata and page-table entries on the device (tokens from `tokens`, or from the
  // previous step's ids at rows `from_rows`, which are argmax ids if `from_greedy`) and
  // publishes the previous step's ids; then the pass and its draws (argmax if greedy). Its own
  // ids wait in pending_publish_.
  Status launch_chain_step(std::span<const ChainRow> rows, const int32_t* tokens, std::span<const int64_t> from_rows,
                           bool from_greedy, bool greedy, int buf);
  // Launches the step after (batch, draws) as ahead_, its tokens from rows `from_rows` of the
  // step in flight, if every sequence has a position left and the pool a page for it; else none.
  Status launch_ahead(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                      std::span<const int64_t> from_rows, bool from_greedy, bool greedy);
  // The tokens of the step in buffer `buf` once it is done (tokens[j] for draws[j], request i
  // being that step's row rows[i]); ahead_, if any, learns its rows' input tokens.
  Status read_chain_step(int buf, std::span<const int64_t> rows, std::span<const RowDraw> draws,
                         std::vector<int32_t>& tokens);
  // Waits for a step launched ahead and takes it back: its sequences lose that position.
  Status cancel_ahead();
  // Whether the step launched ahead extends `seq`.
  bool ahead_holds(SeqId seq) const;
  // The position a chained step gave `seq` (released: -1, nothing) back to the pool.
  void take_back_position(SeqId seq);
  // The device sampler's form of `d`, drawing from row `row` of logits_dev_.
  sample_block::Draw device_draw(const RowDraw& d, int64_t row) const;
  // The draws of pass rows [row0, row0 + rn) (logits_dev_ rows 0..rn-1): their tokens to
  // draw_ids_host_ once the stream is done.
  Status draw_on_device(int64_t row0, int64_t rn);
  Status reserve_draws(size_t n);
  int64_t splits_for(int64_t n) const;
  // Prefix split slots of a shared-prefix pass of n tokens (0: the scratch has no room for them).
  int64_t prefix_splits_for(int64_t n) const;

  ModelConfig config_;
  CudaBackendOptions opts_;
  DType dtype_;
  cudaStream_t stream_ = nullptr;
  Gemm gemm_;
  // Which kernel serves what (made in init(), once the GPU is known).
  std::optional<KernelPlan> plan_;
  // The staged GEMM's partial sums and band counters (one block per SM), where the plan may use it.
  DeviceBuffer staged_partials_, staged_counters_;
  // band_gemm_parts' outputs (kBandMaxParts x kBandMaxTokens rows of the widest of qkv and h),
  // where the plan may use the parts form.
  DeviceBuffer band_parts_;
  int64_t q_dim_, kv_dim_, table_width_, max_tokens_, max_logit_rows_;
  size_t free_at_start_ = 0;  // free device memory once the context exists, before our allocations

  DeviceBuffer embed_, lm_head_, final_norm_, inv_freq_;
  std::vector<Layer> layers_;
  DeviceBuffer kv_pool_, block_table_;
  std::unique_ptr<KvPages> pages_;

  // Activations, sized for max_tokens_.
  DeviceBuffer x_, xn_, qkv_, q_, att_, proj_, gate_up_, act_, part_acc_, part_ml_, fin_, logits_dev_, ids_dev_;
  // int32 [kMetaFields][max_tokens_]: ids, pos, seq, page, out_row, block start, block len, then
  // the shared-prefix plan: ctx_begin, item seq, item prefix, item first, item count, members;
  // then the decode chain's kMetaChainFrom.
  DeviceBuffer meta_;
  int32_t* meta_host_ = nullptr;    // pinned mirror (two: the decode chain's buffer sets)
  // forward_sample on the device: the pass's draws (null: none), draw_order_ their indices by row,
  // draw_row0_ the pass row of the current chunk's first logits row; pinned mirrors and device
  // copies of the draws and their ids, for draw_capacity_ draws.
  const RowDraw* draws_ = nullptr;
  std::vector<size_t> draw_order_;
  int64_t draw_row0_ = 0;
  // For the device draws' blocks (cluster_blocks_per_row: the plan's feature_major) and the
  // staged and band GEMMs (one block per SM).
  int sm_count_ = 0;
  size_t draw_capacity_ = 0;
  sample_block::Draw* draws_host_ = nullptr;
  int32_t* draw_ids_host_ = nullptr;
  DeviceBuffer draws_dev_, draw_ids_dev_;
  std::map<int64_t, cudaGraphExec_t> graphs_;  // single-token passes by 2 * token count + shared
  std::map<int64_t, int> graph_seen_;
  // The decode chain (where the plan has it): the step launched ahead, if any; the buffer set
  // the next step takes; per set, pinned draws and ids (the metadata's is
  // meta_host_ + set * kMetaFields * max_tokens_) and the event of its last step.
  std::optional<ChainStep> ahead_;
  int chain_buf_ = 0;
  sample_block::Draw* chain_draws_host_[2] = {nullptr, nullptr};
  int32_t* chain_ids_host_[2] = {nullptr, nullptr};
  int32_t* chain_patches_host_[2] = {nullptr, nullptr};
  cudaEvent_t chain_done_[2] = {nullptr, nullptr};
  // The last chained step, whose ids are not yet on their way to the host: its buffer set, its
  // rows and where its ids are on the device.
  struct Unpublished {
    int buf = 0;
    int64_t n = 0;
    const int32_t* ids = nullptr;
  };
  std::optional<Unpublished> pending_publish_;
};

}  // namespace kernelllm::cuda
