// SwiGLU; see swiglu.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm::cuda {
namespace {
template <class T, class In>
__global__ void swiglu_kernel(const In* gate_up, int64_t n_tokens, int64_t inter, T* out) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t total = n_tokens * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / inter, j = i % inter;
    const float g = to_f32(gate_up[t * 2 * inter + j]);
    const float u = to_f32(gate_up[t * 2 * inter + inter + j]);
    out[i] = from_f32<T>(g / (1.0f + expf(-g)) * u);
  }
}
}  // namespace

void swiglu(DType type, DType in_type, const void* gate_up, int64_t n_tokens, int64_t inter, void* out,
            cudaStream_t stream) {
  const int64_t total = n_tokens * inter;
  if (total == 0) return;
  const int64_t blocks = (total + 255) / 256;
  dispatch_dtype(type, [&](auto d) {
    dispatch_dtype(in_type, [&](auto di) {
      using T = decltype(d);
      using In = decltype(di);
      launch_kernel(swiglu_kernel<T, In>, static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream,
                    static_cast<const In*>(gate_up), n_tokens, inter, static_cast<T*>(out));
    });
  });
}

}  // namespace kernelllm::cuda
