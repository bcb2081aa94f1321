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

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace kernelllm::cuda
