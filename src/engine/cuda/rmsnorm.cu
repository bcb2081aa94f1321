// RMSNorm kernels; see rmsnorm.cuh. One block per row; the sum of squares is a block reduction.
#include <type_traits>

#include "engine/cuda/device_types.cuh"
#include "engine/cuda/embedding.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/rmsnorm.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

// The float4 chunks threadIdx.x + c * kThreads of a row of n floats (zero past it): the register
// kernels' weights, loaded before their wait (they are constant).
template <int kChunks>
__device__ __forceinline__ void load_weight_chunks(const float* __restrict__ weight, int64_t n, float4 (&w)[kChunks]) {
  const int n4 = static_cast<int>(n / 4);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    w[c] = i < n4 ? __ldg(reinterpret_cast<const float4*>(weight) + i) : float4{0.0f, 0.0f, 0.0f, 0.0f};
  }
}

// out_row = norm of the row whose float4 chunks threadIdx.x + c * kThreads the block's threads
// hold in v (zero past the row), w the weight's same chunks.
template <class T, int kChunks>
__device__ __forceinline__ void norm_row(const float4 (&v)[kChunks], const float4 (&w)[kChunks], int64_t n, float eps,
                                         T* out_row) {
  const int n4 = static_cast<int>(n / 4);
  float sum_sq = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) sum_sq += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
  const float inv = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(n) + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i >= n4) continue;
    T* o = out_row + 4 * static_cast<int64_t>(i);
    o[0] = from_f32<T>(w[c].x * (v[c].x * inv));
    o[1] = from_f32<T>(w[c].y * (v[c].y * inv));
    o[2] = from_f32<T>(w[c].z * (v[c].z * inv));
    o[3] = from_f32<T>(w[c].w * (v[c].w * inv));
  }
}

// Rows of at most kThreads * 4 * kChunks floats (n a multiple of 4): every thread holds its
// float4 chunks in registers and issues all its loads before it uses any, so a row costs one
// memory round trip rather than one per loop iteration plus a second pass (decode rows are a
// block or a few: their time is latency). The weights are constant, so they are loaded before
// the wait for the previous kernel.
template <class T, bool kAdd, int kChunks>
__global__ void __launch_bounds__(kThreads) rmsnorm_regs_kernel(float* __restrict__ x, const float* __restrict__ delta,
                                                                const float* __restrict__ weight, int64_t n, float eps,
                                                                const int32_t* __restrict__ rows_index,
                                                                T* __restrict__ out, int parts) {
  const int n4 = static_cast<int>(n / 4);
  float4 w[kChunks];
  load_weight_chunks(weight, n, w);
  wait_for_predecessor();
  const int64_t r = blockIdx.x;
  const int64_t src = rows_index != nullptr ? rows_index[r] : r;
  float4* xr = reinterpret_cast<float4*>(x + src * n);
  float4 v[kChunks], d[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    v[c] = i < n4 ? xr[i] : float4{0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (kAdd) d[c] = i < n4 ? reinterpret_cast<const float4*>(delta + r * n)[i] : float4{0.0f, 0.0f, 0.0f, 0.0f};
  }
  if constexpr (kAdd) {
    // The delta's further parts (band_gemm_parts' outputs, [rows][n] each), added in order; all
    // their loads go out before the first add (one round trip), up to 4 chunks a thread.
    const int64_t part_stride = static_cast<int64_t>(gridDim.x) * n;
    constexpr int kBatch = kChunks <= 4 ? kMaxOutputParts - 1 : 1;
    for (int q0 = 1; q0 < parts; q0 += kBatch) {
      float4 e[kBatch][kChunks];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int i = threadIdx.x + c * kThreads;
          const bool in = q0 + b < parts && i < n4;
          e[b][c] = in ? reinterpret_cast<const float4*>(delta + (q0 + b) * part_stride + r * n)[i]
                       : float4{0.0f, 0.0f, 0.0f, 0.0f};
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          if (q0 + b >= parts) continue;
          d[c].x += e[b][c].x;
          d[c].y += e[b][c].y;
          d[c].z += e[b][c].z;
          d[c].w += e[b][c].w;
        }
      }
    }
  }
  if constexpr (kAdd) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      v[c].x += d[c].x;
      v[c].y += d[c].y;
      v[c].z += d[c].z;
      v[c].w += d[c].w;
      const int i = threadIdx.x + c * kThreads;
      if (i < n4) xr[i] = v[c];
    }
  }
  norm_row<T, kChunks>(v, w, n, eps, out + r * n);
}

// The embedding lookup and the first norm in one kernel: x[r] = float(table[ids[r]]), out[r] =
// norm(x[r]); the row's elements go into registers as the register kernel's chunks, so x and
// out are what embedding() and rmsnorm() give.
template <class T, int kChunks>
__global__ void __launch_bounds__(kThreads) embed_rmsnorm_kernel(const T* __restrict__ table,
                                                                 const int32_t* __restrict__ ids, float* __restrict__ x,
                                                                 const float* __restrict__ weight, int64_t n, float eps,
                                                                 T* __restrict__ out) {
  const int n4 = static_cast<int>(n / 4);
  float4 w[kChunks];
  load_weight_chunks(weight, n, w);
  wait_for_predecessor();
  const int64_t r = blockIdx.x;
  const T* row = table + static_cast<int64_t>(ids[r]) * n;
  float4 v[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    v[c] = float4{0.0f, 0.0f, 0.0f, 0.0f};
    if (i < n4) {
      const T* e = row + 4 * static_cast<int64_t>(i);
      v[c] = float4{to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3])};
    }
  }
  float4* xr = reinterpret_cast<float4*>(x + r * n);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i < n4) xr[i] = v[c];
  }
  norm_row<T, kChunks>(v, w, n, eps, out + r * n);
}

// Any row length: a strided loop, the row read twice.
template <class T, bool kAdd>
__global__ void rmsnorm_kernel(float* x, const float* delta, const float* weight, int64_t n, float eps,
                               const int32_t* rows_index, T* out, int parts) {
  wait_for_predecessor();
  const int64_t r = blockIdx.x;
  const int64_t src = rows_index != nullptr ? rows_index[r] : r;
  float* xr = x + src * n;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float v = xr[i];
    if constexpr (kAdd) {
      float d = delta[r * n + i];
      for (int q = 1; q < parts; ++q) d += delta[(q * static_cast<int64_t>(gridDim.x) + r) * n + i];
      v += d;
      xr[i] = v;
    }
    sum_sq += v * v;
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) out[r * n + i] = from_f32<T>(weight[i] * (xr[i] * inv));
}

// Calls f(std::integral_constant<int, K>) with the register kernels' K float4 chunks a thread
// (1, 2, 4 or 8) for rows of n floats and returns true, or returns false where a row does not
// fit them (n not a multiple of 4, or longer than kThreads x 32).
template <class F>
bool with_register_chunks(int64_t n, F&& f) {
  const int64_t chunks = n % 4 == 0 ? (n / 4 + kThreads - 1) / kThreads : 0;
  if (chunks == 1) {
    f(std::integral_constant<int, 1>{});
  } else if (chunks == 2) {
    f(std::integral_constant<int, 2>{});
  } else if (chunks >= 3 && chunks <= 4) {
    f(std::integral_constant<int, 4>{});
  } else if (chunks >= 5 && chunks <= 8) {
    f(std::integral_constant<int, 8>{});
  } else {
    return false;
  }
  return true;
}

template <class T, bool kAdd>
void launch_norm(int64_t rows, int64_t n, cudaStream_t stream, float* x, const float* delta, const float* weight,
                 float eps, const int32_t* rows_index, T* out, int parts) {
  const auto launch = [&](auto kernel) {
    launch_kernel(kernel, static_cast<unsigned>(rows), kThreads, 0, stream, x, delta, weight, n, eps, rows_index, out,
                  parts);
  };
  const bool regs = with_register_chunks(n, [&](auto chunks) { launch(rmsnorm_regs_kernel<T, kAdd, decltype(chunks)::value>); });
  if (!regs) launch(rmsnorm_kernel<T, kAdd>);
}

}  // namespace

void rmsnorm(DType type, const float* x, const float* weight, int64_t rows, int64_t n, float eps,
             const int32_t* rows_index, void* out, cudaStream_t stream) {
  if (rows == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_norm<T, false>(rows, n, stream, const_cast<float*>(x), nullptr, weight, eps, rows_index, static_cast<T*>(out),
                          1);
  });
}

void embed_rmsnorm(DType type, const void* table, const int32_t* ids, int64_t rows, int64_t n, const float* weight,
                   float eps, float* x, void* out, cudaStream_t stream) {
  if (rows == 0) return;
  bool regs = false;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    regs = with_register_chunks(n, [&](auto chunks) {
      launch_kernel(embed_rmsnorm_kernel<T, decltype(chunks)::value>, static_cast<unsigned>(rows), kThreads, 0, stream,
                    static_cast<const T*>(table), ids, x, weight, n, eps, static_cast<T*>(out));
    });
  });
  if (!regs) {
    embedding(type, table, ids, rows, n, x, stream);
    rmsnorm(type, x, weight, rows, n, eps, nullptr, out, stream);
  }
}

void add_rmsnorm(DType type, float* x, const float* delta, const float* weight, int64_t rows, int64_t n, float eps,
                 void* out, cudaStream_t stream, int delta_parts) {
  if (rows == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_norm<T, true>(rows, n, stream, x, delta, weight, eps, nullptr, static_cast<T*>(out), delta_parts);
  });
}

}  // namespace kernelllm::cuda
