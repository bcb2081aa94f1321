// Shared-prefix (cascade) decode attention: forks of one prompt hold the same leading KV pages,
// so for a decode pass the prompt part is computed once per KV head for all forks' query rows
// together on the tensor cores, the rest of each sequence (its own pages) from ctx_begin on by a
// tensor-core kernel of its own (or the split kernel of attention.cuh), and both merged exactly
// through their softmax statistics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/attention.cuh"

namespace kernelllm::cuda {

inline constexpr int64_t kSharedRows = 128;         // query rows (forks x group) per prefix block
inline constexpr int64_t kSharedPrefixSplits = 16;  // chunks of the prefix computed in parallel

// Weights the prefix kernel asks into L2 for the projection after the attention (o), while its
// rows compute and HBM is mostly idle: in each of `rows` rows of `row_bytes` at `base`, `bytes`
// from each of `parts` offsets part_stride apart, which are the first stages every block of the
// band GEMM's parts form streams (band_gemm.cu: part r of a row starts at its stage r * stages /
// parts). Only the kernel's idle warps (those no query row needs) ask, a share at each tile after
// the tile's own loads, so that the asks do not queue ahead of them. base null: none; base,
// row_bytes and part_stride 16-byte aligned, bytes a multiple of 16.
// lines: each segment asked as its 128-byte lines (prefetch.global.L2, which nothing waits for)
// rather than as one bulk request (cp.async.bulk.prefetch.L2, whose issue held the asking warps
// and with them the block's tile barriers; at k = 20 lines gave 6.225 against 6.248 ms a step
// with none, where bulk requests lost).
struct L2Prefetch {
  const void* base = nullptr;
  int64_t rows = 0, row_bytes = 0, part_stride = 0;
  int parts = 1, bytes = 0;
  bool lines = false;
};

// The prefix work of one pass, as device arrays of n_tokens entries (an "item" is a set of
// tokens that read positions [0, item_prefix) through the block-table row item_seq; unused
// items have count 0). Every token of the pass is a member of exactly one item.
struct SharedPrefixArgs {
  const int32_t* item_seq = nullptr;
  const int32_t* item_prefix = nullptr;
  const int32_t* item_first = nullptr;  // offset of the item's first member in members
  const int32_t* item_count = nullptr;
  const int32_t* members = nullptr;     // token indices, grouped by item
  L2Prefetch next_weights;
  // The prefix kernel's queries and softmax weights P as high and low halves in the cache dtype
  // (two products each: S and O about as exact as with fp32 operands); false rounds each to the
  // cache dtype once, with fp32 accumulation, as FlashAttention and PyTorch's SDPA compute.
  bool low_halves = true;
  // The prefix kernel's K and V loads under an L2 evict-first policy (each row is read once a
  // pass: after its load it should not push out what later kernels read back).
  bool kv_evict_first = false;
};

// The host-side plan for one single-token-per-sequence pass, from each token's page list and
// position: forks whose leading full pages (before the page of pos) are the same physical pages
// form an item (at most kSharedRows / group members each); the others are items of one with
// prefix 0. ctx_begin[t] is the prefix of t's item. shared: some item has >= 2 members and a
// prefix > 0 (otherwise the plain attention is the better kernel).
struct SharedPrefixPlan {
  std::vector<int32_t> ctx_begin, item_seq, item_prefix, item_first, item_count, members;
  bool shared = false;
};
void plan_shared_prefix(const std::vector<const std::vector<int32_t>*>& pages, const std::vector<int32_t>& pos,
                        const std::vector<int32_t>& seq, int64_t page_tokens, int64_t group, SharedPrefixPlan& plan);

// shared_prefix_supported (shapes.h): bf16/f16 caches, head_dim 16/32/64/128, group <= 8.

// The own positions of a decode pass (split slots 0..splits-1 of each token's positions from
// ctx_begin on, as attention_partial writes them) on the tensor cores (attention_suffix.cu):
// bf16/f16 caches, head_dim 64 or 128, group <= 4. No RoPE fold: q holds the rotated queries.
// Where suffix_tma_serves (args.kv.pages known, pages of 16 tokens) the K and V rows come into
// shared memory by TMA copies, a page at a time, the splits cut at page boundaries; otherwise
// each warp loads them into registers, the splits as the split kernel's. suffix_mma_supported:
// shapes.h.
bool suffix_tma_serves(DType type, const AttentionArgs& args);
void suffix_attention_mma(DType type, const AttentionArgs& args, int64_t splits, cudaStream_t stream);

// One decode pass: args as for attention() plus ctx_begin (the plan's), with args.splits =
// suffix_splits + prefix_splits total split slots in the partial buffers (the graph-stable
// shapes: the grids depend on n_tokens and the split counts only, lengths are read on device).
// mma_suffix: the own positions by suffix_attention_mma where supported, else by the split
// kernel (attention_partial).
void shared_prefix_attention(DType type, const AttentionArgs& args, const SharedPrefixArgs& shared,
                             int64_t suffix_splits, int64_t prefix_splits, cudaStream_t stream,
                             bool mma_suffix = true);

}  // namespace kernelllm::cuda
