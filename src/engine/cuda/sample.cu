// The device sampler (sample.cuh): sample_block.h's draw_token with one block of 512 threads per
// draw, the block's barrier and shared-memory atomics behind the Ctx it expects.
#include "engine/cuda/launch.cuh"
#include "engine/cuda/sample.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 512;
static_assert(kThreads <= sample_block::kMaxThreads);

// The Ctx of draw_token. Host-device members so that nvcc accepts the template's host side;
// only the kernel calls them.
struct DeviceBlock {
  __host__ __device__ int tid() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int threads() const { return kThreads; }
  __host__ __device__ void sync() const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  __host__ __device__ void add(uint64_t* p, uint64_t v) const {
#if defined(__CUDA_ARCH__)
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
    (void)p;
    (void)v;
#endif
  }
  __host__ __device__ void min(uint32_t* p, uint32_t v) const {
#if defined(__CUDA_ARCH__)
    atomicMin(p, v);
#else
    (void)p;
    (void)v;
#endif
  }
};

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int64_t vocab, const sample_block::Draw* draws, int32_t* ids) {
  grid_dependency_wait();
  allow_dependent_launch();
  __shared__ sample_block::Shared sh;
  DeviceBlock ctx;
  const sample_block::Draw d = draws[blockIdx.x];
  const int32_t token = sample_block::draw_token(ctx, sh, logits + d.row * vocab, vocab, d);
  if (threadIdx.x == 0) ids[blockIdx.x] = token;
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const sample_block::Draw* draws, int64_t n_draws, int32_t* ids,
                 cudaStream_t stream) {
  if (n_draws == 0) return;
  launch_kernel(sample_kernel, static_cast<unsigned>(n_draws), kThreads, 0, stream, logits, vocab, draws, ids);
}

}  // namespace kernelllm::cuda
