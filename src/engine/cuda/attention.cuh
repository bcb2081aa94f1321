// Causal attention over the paged KV cache (prefill and decode alike: every query token
// attends to positions 0..pos of its own sequence), GQA (one block serves all query heads of
// a KV head, so K/V are read once per group), split-KV: the positions of a token are cut into
// `splits` chunks computed in parallel and merged with their softmax statistics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/rope.cuh"
#include "engine/cuda/shapes.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

inline constexpr int64_t kMaxAttentionGroup = 8;     // query heads per KV head
inline constexpr int64_t kMaxAttentionHeadDim = 256;  // and a multiple of 8 (16-byte K loads)
inline constexpr int kMaxAttentionSplits = 64;        // the most split slots (args.splits) per token

struct AttentionArgs {
  const float* q = nullptr;          // [T, heads * head_dim], rotated
  int64_t n_tokens = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  const int32_t* seq = nullptr;      // [T] row of block_table for each token
  const int32_t* pos = nullptr;      // [T] position of each token (attends to 0..pos)
  const int32_t* block_table = nullptr;  // [rows, table_width] physical page per logical page
  int64_t table_width = 0;
  KvLayout kv;
  int64_t layer = 0;
  int64_t splits = 1;
  float* partial_acc = nullptr;      // [T, heads, splits, head_dim]
  float* partial_ml = nullptr;       // [T, heads, splits, 2]
  void* out = nullptr;               // [T, heads * head_dim], backend dtype
  // Query blocks for prefill_attention: up to kPrefillQueryBlock consecutive tokens of one
  // sequence each.
  const int32_t* q_block_start = nullptr;  // [n_q_blocks] first token
  const int32_t* q_block_len = nullptr;    // [n_q_blocks] 1..kPrefillQueryBlock
  int64_t n_q_blocks = 0;
  // Decode passes whose leading positions another kernel covers (attention_shared.cuh): the
  // split kernel then takes positions ctx_begin[t]..pos[t] only; null means from 0.
  const int32_t* ctx_begin = nullptr;
  // Decode: each split of the partial kernel takes at least this many positions (0: none), so a
  // grid sized for long contexts has its short ones done by fewer splits; the splits left
  // without positions write empty statistics, which the merge skips.
  int64_t min_split_positions = 0;
  // Decode passes of one new token per sequence: RoPE and the KV write folded into the split
  // kernel (attention_partial; null: q is rotated and the cache written already). rope_qkv holds
  // the fused projection rows [T, (heads + 2 * kv_heads) * head_dim], unrotated, in fp32 where
  // rope_qkv_f32 else in the cache dtype. The kernel rotates its query heads (q unused; they go to
  // rope_q_out too where that is not null, for a later kernel), and the block whose positions
  // end at the token's own writes that position's K and V rows (KV head blockIdx.y) and scores it
  // from shared memory. Only where no other token of the pass attends to a token's own position.
  const void* rope_qkv = nullptr;
  bool rope_qkv_f32 = false;
  const float* rope_inv_freq = nullptr;  // [head_dim / 2]
  float* rope_q_out = nullptr;           // [T, heads * head_dim] or null
  // The cascade's own positions by TMA: their K/V rows under an L2 evict-first policy (each is
  // read once a pass; tma.cuh's tma_box_once).
  bool kv_evict_first = false;
};

// Scratch floats needed: acc T*heads*splits*head_dim, ml T*heads*splits*2. `warps`: the partial
// kernel's warps per block, 8 or 16 (fewer where its shared memory needs it); 0 picks 16 where the
// grid has at most one block per SM, else 8 (the ops bench times both).
void attention(DType type, const AttentionArgs& args, cudaStream_t stream, int warps = 0);
// attention() in its two steps: the partial kernel over `grid_splits` chunks of each token's
// positions, writing split slots 0..grid_splits-1 of args.splits, and the merge of all
// args.splits slots (slots from grid_splits on are written by another kernel). args.splits is at
// most kMaxAttentionSplits.
void attention_partial(DType type, const AttentionArgs& args, int64_t grid_splits, cudaStream_t stream,
                       int warps = 0);
void attention_merge(DType type, const AttentionArgs& args, cudaStream_t stream);
// Whether attention_partial with these arguments can fold RoPE and the KV write in (rope_qkv):
// every instance but the one held to three blocks per SM (a k = 20 decode pass's grid).
bool attention_partial_folds_rope(DType type, const AttentionArgs& args, int64_t grid_splits, int warps = 0);

// The tensor-core path for passes with many tokens per sequence (no splits, no scratch):
// bf16/f16 caches, head_dim 16/32/64/128, at most 8 query heads per KV head, over query blocks of
// up to kPrefillQueryBlock tokens. Its kernels (attention_prefill.cu; equal outputs, bit for bit):
// - row_tile: a warp per 16-row tile of a query head, one tile per query head in a block;
// - row_tiles2: the same with two tiles per query head in a block, halving the K/V tile traffic
//   (groups of at most 4 query heads: at most 8 warps per block);
// - head_rows: a warp per query head with both 16-row tiles of the query block, so every K/V
//   fragment read from shared memory feeds two products (groups of 1, 2, 4 or 8);
// (PrefillKernel, prefill_attention_supported, prefill_kernel_serves, prefill_smem_bytes:
// shapes.h; the kernel plan picks the form.) A kernel that does not serve the group falls back
// to row_tile. The ops bench times each.
void prefill_attention(DType type, const AttentionArgs& args, cudaStream_t stream, PrefillKernel kernel);

}  // namespace kernelllm::cuda
