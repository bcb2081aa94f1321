// RoPE (HF rotate_half layout; the inverse frequencies come from the host, llama3 scaling
// included) applied to the fused q|k|v projection output, and the K/V write into the paged
// cache. Cache layout: element (((page * layers + layer) * 2 + {0:K,1:V}) * page_tokens + slot) * kv_dim + d.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/common.cuh"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

struct KvLayout {
  void* pool = nullptr;  // the cache's element type is the backend dtype
  int64_t layers = 0;
  int64_t page_tokens = 0;
  int64_t kv_dim = 0;  // kv_heads * head_dim
  int64_t pages = 0;   // physical pages in the pool (0: unknown, no TMA copies of its rows)
};

// For each token t: q_out[t] = rope(qkv[t, :q_dim]); K = rope(qkv[t, q_dim : q_dim+kv_dim]),
// V = qkv[t, q_dim+kv_dim :] written at page page_of[t], slot pos[t] % page_tokens, of `layer`.
// qkv holds in_type elements: f32 (the GEMV's output) or the cache dtype `type` (cuBLASLt's);
// with in_parts > 1 (f32), that many [n_tokens][row] arrays one after another (band_gemm_parts'
// outputs; 1..kMaxOutputParts, common.cuh), whose sum in order is the projection.
void rope_write_kv(DType type, DType in_type, const void* qkv, int64_t n_tokens, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   const int32_t* pos, const int32_t* page_of, const float* inv_freq, const KvLayout& kv, int64_t layer,
                   float* q_out, cudaStream_t stream, int in_parts = 1);

}  // namespace kernelllm::cuda
