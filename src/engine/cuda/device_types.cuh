// Device-side element types: loads and stores of f32/f16/bf16 as float, 16-byte vector
// loads, and dispatch from the runtime DType to a template. nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The Llama MLP activation of one (gate, up) pair: silu(g) * u, in fp32 (swiglu.cuh and the
// GEMV's fused form compute it alike).
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// VEC elements of T in 16 bytes.
template <class T>
struct Vec16 {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
};

// Loads 16 bytes (kN elements) from `p` (16-byte aligned) into floats, through the read-only path.
template <class T>
__device__ __forceinline__ void load16(const T* p, float* out) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kN; ++i) out[i] = to_f32(e[i]);
}

// Calls f(T{}) with T the element type of `t` (f32, f16, bf16).
template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::bf16: f(__nv_bfloat16{}); break;
    case DType::f16: f(__half{}); break;
    default: f(float{}); break;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Position -> (logical page, offset in the page), in 32-bit arithmetic (positions are below
// 2^31) and by shifts when the page size is a power of two: 64-bit division by a runtime value
// costs ~100 instructions, which the attention kernels' tile loads paid per 16-byte chunk.
struct PagedPos {
  int page, offset;
};
__device__ __forceinline__ PagedPos paged_pos(int pos, int page_tokens) {
  if ((page_tokens & (page_tokens - 1)) == 0) {
    const int shift = __ffs(page_tokens) - 1;
    return {pos >> shift, pos & (page_tokens - 1)};
  }
  const int page = pos / page_tokens;
  return {page, pos - page * page_tokens};
}

// The K row of position `pos` of one layer in the paged pool ([page][layer][K, V][page_tokens]
// [kv_dim], rope.cuh's KvLayout) for a sequence whose page table row is `table`; its V row is
// page_tokens * kv_dim elements further.
template <class T>
__device__ __forceinline__ const T* paged_k_row(const T* pool, const int32_t* table, int pos, int page_tokens,
                                               int64_t layers, int64_t layer, int64_t kv_dim) {
  const PagedPos pp = paged_pos(pos, page_tokens);
  const int64_t page = table[pp.page];
  return pool + (((page * layers + layer) * 2) * page_tokens + pp.offset) * kv_dim;
}

// 16 bytes from global memory that is read once: non-coherent path, not kept in L1. volatile: the
// load is only ever issued where the code issues it (never hoisted out of its bounds check).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// An L2 evict-first cache policy (createpolicy) for data a pass reads once: weights, the cascade
// prefix kernel's K/V rows.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// load_stream with `hinted` under `policy` (evict_first_policy): for the GEMV's and the skinny
// GEMM's weights (common.cuh's weights_evict_first, which the GEMMs' TMA copies follow too) and
// the prefix kernel's K/V rows, so that what a pass reads once does not push out of L2 what the
// small kernels read back.
__device__ __forceinline__ uint4 load_stream(const void* p, bool hinted, uint64_t policy) {
  if (!hinted) return load_stream(p);
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// RoPE (rotate-half) of the pair (x0, x1) = dims (j, j + head_dim / 2) of a head at position p,
// j's frequency `freq`: the rotated dims j (.x) and j + head_dim / 2 (.y). rope_write_kv and the
// rope-folded split attention kernel both rotate through it, so their K rows agree bit for bit.
__device__ __forceinline__ float2 rope_pair(float x0, float x1, int p, float freq) {
  const float angle = static_cast<float>(p) * freq;
  const float c = cosf(angle), s = sinf(angle);
  return float2{x0 * c - x1 * s, x1 * c + x0 * s};
}

// Brings the 128-byte line holding `p` into L2 (no registers, nothing waits for it). Always safe,
// also for data another kernel is still writing: L2 is where the writes land.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
// `bytes` (a multiple of 16) from p (16-byte aligned) into L2 by one bulk request (compute
// capability 9.0+; a no-op before).
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// Prefetches into L2 the K and V rows of positions [begin, end) of one KV head (its first
// element `head_offset` into the row, `head_dim` elements), threads `thread`, + `stride`, ...
// sharing the 128-byte lines.
template <class T>
__device__ __forceinline__ void prefetch_kv_rows(const T* pool, const int32_t* table, int64_t begin, int64_t end,
                                                 int page_tokens, int64_t layers, int64_t layer, int64_t kv_dim,
                                                 int64_t head_offset, int64_t head_dim, int thread, int stride) {
  constexpr int kLineElems = 128 / static_cast<int>(sizeof(T));
  const int64_t lines = (head_dim + kLineElems - 1) / kLineElems;
  for (int64_t i = thread; i < (end - begin) * lines; i += stride) {
    const T* kp = paged_k_row(pool, table, static_cast<int>(begin + i / lines), page_tokens, layers, layer, kv_dim) +
                  head_offset + (i % lines) * kLineElems;
    prefetch_l2(kp);
    prefetch_l2(kp + static_cast<int64_t>(page_tokens) * kv_dim);
  }
}

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace kernelllm::cuda
