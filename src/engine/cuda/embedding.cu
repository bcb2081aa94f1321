// Embedding lookup; see embedding.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/embedding.cuh"

namespace kernelllm::cuda {
namespace {
template <class T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, int64_t hidden, float* out) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(ids[t]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[t * hidden + i] = to_f32(row[i]);
}
}  // namespace

void embedding(DType type, const void* table, const int32_t* ids, int64_t n_tokens, int64_t hidden, float* out,
               cudaStream_t stream) {
  if (n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(embedding_kernel<T>, static_cast<unsigned>(n_tokens), 256, 0, stream, static_cast<const T*>(table),
                  ids, hidden, out);
  });
}

}  // namespace kernelllm::cuda
