// Device pieces of RoPE and the KV write shared by rope.cu's kernel and the GEMV's fused form
// (gemv_rope_write_kv): the rotation of one (j, j + head_dim / 2) pair and the cache slot of a
// token. nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kernelllm::cuda {

// (a, b) rotated by the angle pos * freq (HF rotate_half: a is dim j, b dim j + head_dim / 2).
__device__ __forceinline__ void rope_rotate(float a, float b, int32_t pos, float freq, float& ra, float& rb) {
  const float angle = static_cast<float>(pos) * freq;
  const float c = cosf(angle), s = sinf(angle);
  ra = a * c - b * s;
  rb = b * c + a * s;
}

// The K (part 0) or V (part 1) row of position `pos` of `layer` in physical page `page` of the
// paged pool (rope.cuh's KvLayout).
template <class T>
__device__ __forceinline__ T* kv_slot(T* pool, int64_t page, int64_t layers, int64_t layer, int part,
                                      int64_t page_tokens, int32_t pos, int64_t kv_dim) {
  return pool + (((page * layers + layer) * 2 + part) * page_tokens + pos % page_tokens) * kv_dim;
}

}  // namespace kernelllm::cuda
