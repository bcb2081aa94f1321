// The decode GEMV; see gemv.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/gemv.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;

template <class T, int N>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemv_kernel(const T* w, int64_t rows, int64_t cols,
                                                                   const T* x, float* y) {
  constexpr int V = Vec16<T>::kN;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* wr = w + row * cols;
  float acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0.0f;
  constexpr int64_t kStep = 32 * V;
  int64_t c = lane * V;
  for (; c + (kUnroll - 1) * kStep < cols; c += kUnroll * kStep) {
    float wv[kUnroll][V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load16(wr + c + u * kStep, wv[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xv[V];
        load16(x + n * cols + c + u * kStep, xv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[n] += wv[u][i] * xv[i];
      }
    }
  }
  for (; c < cols; c += kStep) {
    float wv[V];
    load16(wr + c, wv);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float xv[V];
      load16(x + n * cols + c, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[n] += wv[i] * xv[i];
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float s = warp_sum(acc[n]);
    if (lane == 0) y[n * rows + row] = s;
  }
}

template <class T, int N>
void launch(const void* w, int64_t rows, int64_t cols, const void* x, float* y, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  gemv_kernel<T, N><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(static_cast<const T*>(w), rows, cols,
                                                                 static_cast<const T*>(x), y);
}

}  // namespace

bool gemv_supported(DType type, int64_t cols, int64_t n_tokens) {
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(type));
  return n_tokens >= 1 && n_tokens <= kGemvMaxTokens && cols % vec == 0 && cols % 8 == 0;
}

void gemv(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, float* y,
          cudaStream_t stream) {
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    switch (n_tokens) {
      case 1: launch<T, 1>(w, rows, cols, x, y, stream); break;
      case 2: launch<T, 2>(w, rows, cols, x, y, stream); break;
      case 3: launch<T, 3>(w, rows, cols, x, y, stream); break;
      case 4: launch<T, 4>(w, rows, cols, x, y, stream); break;
      case 5: launch<T, 5>(w, rows, cols, x, y, stream); break;
      case 6: launch<T, 6>(w, rows, cols, x, y, stream); break;
      case 7: launch<T, 7>(w, rows, cols, x, y, stream); break;
      default: launch<T, 8>(w, rows, cols, x, y, stream); break;
    }
  });
}

}  // namespace kernelllm::cuda
