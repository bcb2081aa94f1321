// SwiGLU; see swiglu.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm::cuda {
namespace {
template <class T, class In>
__global__ void swiglu_kernel(const In* gate_up, int64_t n_tokens, int64_t inter, T* out) {
  wait_for_predecessor();
  const int64_t total = n_tokens * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / inter, j = i % inter;
    out[i] = from_f32<T>(silu_mul(to_f32(gate_up[t * 2 * inter + j]), to_f32(gate_up[t * 2 * inter + inter + j])));
  }
}

// 8 outputs per thread from two vector loads (inter a multiple of 8): the prefill's largest
// elementwise pass, which the one-element loop above ran at half the memory rate.
template <class T, class In>
__global__ void swiglu8_kernel(const In* gate_up, int64_t n_tokens, int64_t inter, T* out) {
  struct alignas(8 * sizeof(In)) In8 {
    In e[8];
  };
  struct alignas(8 * sizeof(T)) Out8 {
    T e[8];
  };
  wait_for_predecessor();
  const int64_t per_token = inter / 8, total = n_tokens * per_token;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < total; c += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = c / per_token, j = (c - t * per_token) * 8;
    const In8 g = *reinterpret_cast<const In8*>(gate_up + t * 2 * inter + j);
    const In8 u = *reinterpret_cast<const In8*>(gate_up + t * 2 * inter + inter + j);
    Out8 o;
#pragma unroll
    for (int i = 0; i < 8; ++i) o.e[i] = from_f32<T>(silu_mul(to_f32(g.e[i]), to_f32(u.e[i])));
    *reinterpret_cast<Out8*>(out + t * inter + j) = o;
  }
}
}  // namespace

void swiglu(DType type, DType in_type, const void* gate_up, int64_t n_tokens, int64_t inter, void* out,
            cudaStream_t stream) {
  const int64_t total = n_tokens * inter;
  if (total == 0) return;
  const bool by8 = inter % 8 == 0;
  const int64_t blocks = ((by8 ? total / 8 : total) + 255) / 256;
  dispatch_dtype(type, [&](auto d) {
    dispatch_dtype(in_type, [&](auto di) {
      using T = decltype(d);
      using In = decltype(di);
      launch_kernel(by8 ? swiglu8_kernel<T, In> : swiglu_kernel<T, In>,
                    static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream,
                    static_cast<const In*>(gate_up), n_tokens, inter, static_cast<T*>(out));
    });
  });
}

}  // namespace kernelllm::cuda
