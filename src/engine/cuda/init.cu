// Weight conversion and seeded random fill; see init.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/init.cuh"

namespace kernelllm::cuda {
namespace {

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_f32<D>(to_f32(src[i]));
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class D>
__global__ void random_kernel(D* dst, int64_t n, uint64_t seed, float half_width) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    dst[i] = from_f32<D>((2.0f * u - 1.0f) * half_width);
  }
}

template <class D>
__global__ void value_kernel(D* dst, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_f32<D>(value);
  }
}

constexpr int kThreads = 256;
unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

void convert(DType dst_type, void* dst, DType src_type, const void* src, int64_t n, cudaStream_t stream) {
  dispatch_dtype(dst_type, [&](auto d) {
    using D = decltype(d);
    dispatch_dtype(src_type, [&](auto s) {
      using S = decltype(s);
      convert_kernel<D, S><<<grid_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
    });
  });
}

void fill_random(DType type, void* dst, int64_t n, uint64_t seed, float std, cudaStream_t stream) {
  dispatch_dtype(type, [&](auto d) {
    using D = decltype(d);
    random_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst), n, seed, std * 1.7320508f);
  });
}

void fill_value(DType type, void* dst, int64_t n, float value, cudaStream_t stream) {
  dispatch_dtype(type, [&](auto d) {
    using D = decltype(d);
    value_kernel<D><<<grid_for(n), kThreads, 0, stream>>>(static_cast<D*>(dst), n, value);
  });
}

}  // namespace kernelllm::cuda
