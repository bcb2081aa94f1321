// The skinny GEMM; see skinny_gemm.cuh. One mma.sync m16n8k16 multiplies a tile of 16 weight
// rows by 8 tokens over 16 columns. The products are summed over all columns, so the order in
// which a thread's fragment registers visit them is free as long as A (weights) and B (tokens)
// agree: here thread (g = lane / 4, q = lane % 4) holds, for each 32-column chunk c, the 8
// contiguous columns 32c + 8q .. 32c + 8q + 7 of its weight rows g and g + 8 and of its token
// row g, one 16-byte load each, and feeds columns 8q + 4s .. 8q + 4s + 3 to mma step s (0, 1).
// No shared memory or shuffles between the loads and the tensor cores: weights stream from HBM
// (L1 bypassed, several chunks in flight per thread) and token rows come through L1, which the
// SM's other blocks then hit. A warp computes tiles_per_warp row tiles, so each token load
// serves that many weight tiles; the block's warps split the columns and add up in shared memory
// in a fixed order (results do not depend on timing).
#include <string>
#include <type_traits>

#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/skinny_gemm.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kMaxKWarps = 8;
constexpr int kMaxWarpTiles = 16;  // tiles_per_warp * k_warps: 32 KB of shared sums at most
constexpr int kLoadsPerThread = 8;  // 16-byte weight loads in flight per thread
constexpr int64_t kMinChunksPerWarp = 8;

__device__ __forceinline__ uint4 load_cached(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// MT row tiles per warp, NT tiles of 8 tokens. Every thread reaches the __syncthreads.
template <class T, class Y, int MT, int NT>
__global__ void __launch_bounds__(kMaxKWarps * 32) skinny_kernel(const T* __restrict__ w, int64_t rows, int64_t cols,
                                                                 const T* __restrict__ x, int n_tokens, Y* y,
                                                                 bool accumulate, int64_t chunks_per_warp) {
  constexpr int U = kLoadsPerThread / (2 * MT);  // chunks per batch
  extern __shared__ float red[];                  // [k_warps][MT][NT][4][32]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * MT * 16;
  const int64_t chunks = (cols + 31) / 32;
  const int64_t c_begin = warp * chunks_per_warp;
  const int64_t c_end = c_begin + chunks_per_warp < chunks ? c_begin + chunks_per_warp : chunks;

  const T* wr[MT][2];
  bool w_ok[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = m0 + mt * 16 + g + 8 * h;
      w_ok[mt][h] = r < rows;
      wr[mt][h] = w + (w_ok[mt][h] ? r : 0) * cols + 8 * q;
    }
  }
  const T* xr[NT];
  bool x_ok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int n = nt * 8 + g;
    x_ok[nt] = n < n_tokens;
    xr[nt] = x + (x_ok[nt] ? n : 0) * cols + 8 * q;
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    }
  }

  using Batch = uint4[U][MT][2];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const auto load_weights = [&](Batch& a, int64_t c) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = c + u < c_end && (c + u) * 32 + 8 * q < cols;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) a[u][mt][h] = in && w_ok[mt][h] ? load_stream(wr[mt][h] + (c + u) * 32) : zero;
      }
    }
  };
  // The token chunks of batch c, then the products with the weights in `a`.
  const auto multiply = [&](const Batch& a, int64_t c) {
    uint4 b[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = c + u < c_end && (c + u) * 32 + 8 * q < cols;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) b[u][nt] = in && x_ok[nt] ? load_cached(xr[nt] + (c + u) * 32) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t* lo = reinterpret_cast<const uint32_t*>(&a[u][mt][0]);
          const uint32_t* hi = reinterpret_cast<const uint32_t*>(&a[u][mt][1]);
          const uint32_t frag[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint32_t* bv = reinterpret_cast<const uint32_t*>(&b[u][nt]);
            mma<T>(acc[mt][nt], frag, bv[2 * s], bv[2 * s + 1]);
          }
        }
      }
    }
  };

  // Weights are constant: the first batch is loaded before waiting for the previous kernel.
  Batch a0;
  load_weights(a0, c_begin);
  wait_for_predecessor();
  for (int64_t c = c_begin; c < c_end; c += U) {
    if (c != c_begin) load_weights(a0, c);
    multiply(a0, c);
  }

  // The warps' sums meet in shared memory; thread e of the block adds element e (and e + block
  // size, ...) over the warps in order and writes it.
  constexpr int kPerWarp = MT * NT * 4 * 32;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp * kPerWarp + ((mt * NT + nt) * 4 + i) * 32 + lane] = acc[mt][nt][i];
    }
  }
  __syncthreads();
  const int k_warps = static_cast<int>(blockDim.x) / 32;
  for (int e = static_cast<int>(threadIdx.x); e < kPerWarp; e += static_cast<int>(blockDim.x)) {
    float sum = 0.0f;
    for (int j = 0; j < k_warps; ++j) sum += red[j * kPerWarp + e];
    const int l = e % 32, i = (e / 32) % 4, tile = e / 128;
    const int64_t m = m0 + (tile / NT) * 16 + l / 4 + (i >= 2 ? 8 : 0);
    const int n = (tile % NT) * 8 + 2 * (l % 4) + (i & 1);
    if (m < rows && n < n_tokens) {
      Y* out = y + static_cast<int64_t>(n) * rows + m;
      if constexpr (std::is_same_v<Y, float>) {
        *out = accumulate ? *out + sum : sum;
      } else {
        *out = from_f32<Y>(sum);
      }
    }
  }
}

template <class T, class Y, int MT, int NT>
void launch(const SkinnyConfig& c, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens,
            void* y, bool accumulate, cudaStream_t stream) {
  const int64_t chunks = (cols + 31) / 32;
  const int64_t per_warp = (chunks + c.k_warps - 1) / c.k_warps;
  const auto blocks = static_cast<unsigned>((rows + MT * 16 - 1) / (MT * 16));
  const size_t smem = static_cast<size_t>(c.k_warps) * MT * NT * 4 * 32 * sizeof(float);
  launch_kernel(skinny_kernel<T, Y, MT, NT>, blocks, c.k_warps * 32, smem, stream, static_cast<const T*>(w), rows,
                cols, static_cast<const T*>(x), static_cast<int>(n_tokens), static_cast<Y*>(y), accumulate, per_warp);
}

template <class T, class Y>
void dispatch_tiles(const SkinnyConfig& c, const void* w, int64_t rows, int64_t cols, const void* x,
                    int64_t n_tokens, void* y, bool accumulate, cudaStream_t stream) {
  const auto go = [&](auto mt) {
    constexpr int MT = decltype(mt)::value;
    switch ((n_tokens + 7) / 8) {
      case 1: launch<T, Y, MT, 1>(c, w, rows, cols, x, n_tokens, y, accumulate, stream); break;
      case 2: launch<T, Y, MT, 2>(c, w, rows, cols, x, n_tokens, y, accumulate, stream); break;
      case 3: launch<T, Y, MT, 3>(c, w, rows, cols, x, n_tokens, y, accumulate, stream); break;
      default: launch<T, Y, MT, 4>(c, w, rows, cols, x, n_tokens, y, accumulate, stream); break;
    }
  };
  switch (c.tiles_per_warp) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    default: go(std::integral_constant<int, 4>{}); break;
  }
}

void run(const SkinnyConfig& c, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
         int64_t n_tokens, void* y, DType y_type, bool accumulate, cudaStream_t stream) {
  if (rows <= 0) return;
  const auto with_t = [&](auto t) {
    using T = decltype(t);
    if (y_type == DType::f32) {
      dispatch_tiles<T, float>(c, w, rows, cols, x, n_tokens, y, accumulate, stream);
    } else {
      dispatch_tiles<T, T>(c, w, rows, cols, x, n_tokens, y, false, stream);
    }
  };
  if (type == DType::bf16) {
    with_t(__nv_bfloat16{});
  } else {
    with_t(__half{});
  }
}

bool config_valid(const SkinnyConfig& c) {
  const bool t_ok = c.tiles_per_warp == 1 || c.tiles_per_warp == 2 || c.tiles_per_warp == 4;
  const bool k_ok = c.k_warps == 1 || c.k_warps == 2 || c.k_warps == 4 || c.k_warps == 8;
  return t_ok && k_ok && c.tiles_per_warp * c.k_warps <= kMaxWarpTiles;
}

}  // namespace

bool skinny_supported(DType type, int64_t cols, int64_t n_tokens) {
  return (type == DType::bf16 || type == DType::f16) && cols > 0 && cols % 8 == 0 && n_tokens >= 1 &&
         n_tokens <= kSkinnyMaxTokens;
}

SkinnyConfig skinny_config(int64_t cols) {
  SkinnyConfig c;
  // One row tile per warp (more tiles per warp cut token loads but leave too few warps, NOTES),
  // the columns split over up to 8 warps while each keeps a few batches of loads.
  c.tiles_per_warp = 1;
  const int64_t chunks = (cols + 31) / 32;
  c.k_warps = 1;
  while (c.k_warps < kMaxKWarps && chunks / (c.k_warps * 2) >= kMinChunksPerWarp) c.k_warps *= 2;
  return c;
}

void skinny_gemm(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
                 DType y_type, bool accumulate, cudaStream_t stream) {
  run(skinny_config(cols), type, w, rows, cols, x, n_tokens, y, y_type, accumulate, stream);
}

Status skinny_gemm_with_config(const SkinnyConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                               const void* x, int64_t n_tokens, void* y, DType y_type, bool accumulate,
                               cudaStream_t stream) {
  if (!config_valid(config)) {
    return error(ErrorCode::invalid_argument,
                 "skinny gemm layout: expected tiles_per_warp in {1, 2, 4}, k_warps in {1, 2, 4, 8} and their "
                 "product <= 16, found " +
                     std::to_string(config.tiles_per_warp) + " and " + std::to_string(config.k_warps));
  }
  if (!skinny_supported(type, cols, n_tokens) || rows < 0) {
    return error(ErrorCode::invalid_argument,
                 "skinny gemm shape: expected f16/bf16 weights, rows >= 0, cols a positive multiple of 8 and 1.." +
                     std::to_string(kSkinnyMaxTokens) + " tokens, found " + std::string(dtype_name(type)) + ", rows " +
                     std::to_string(rows) + ", cols " + std::to_string(cols) + ", tokens " +
                     std::to_string(n_tokens));
  }
  if (y_type != DType::f32 && (y_type != type || accumulate)) {
    return error(ErrorCode::invalid_argument,
                 "skinny gemm output: expected f32 (fresh or accumulated) or the weights' dtype (fresh), found " +
                     std::string(dtype_name(y_type)) + (accumulate ? " accumulated" : ""));
  }
  run(config, type, w, rows, cols, x, n_tokens, y, y_type, accumulate, stream);
  return Status::ok_status();
}

}  // namespace kernelllm::cuda
