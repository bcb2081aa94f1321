// The skinny GEMM; see skinny_gemm.cuh. One mma.sync m16n8k16 multiplies a tile of 16 weight
// rows by 8 tokens over 16 columns. The products are summed over all columns, so the order in
// which a thread's fragment registers visit them is free as long as A (weights) and B (tokens)
// agree: here thread (g = lane / 4, q = lane % 4) holds, for each 64-column chunk c, the 8
// contiguous columns 64c + 32h + 8q .. + 7 (h = 0, 1) of its weight rows g and g + 8 and of its
// token row g, and feeds columns 32h + 8q + 4s .. + 3 to mma step (h, s).
// Weights stream from HBM with L1 bypassed, several loads in flight per thread. Each load
// instruction takes whole 128-byte lines of 4 rows: per chunk and 8 rows, lanes g < 4 load the
// first half of row g and the second half of row g + 4, lanes g >= 4 the second half of row
// g - 4 and the first half of row g, and lanes l and l ^ 16 swap the half each holds for the
// other (one shuffle per register). The block's warps split the columns, by default dealt out in
// turn, so at each step the block reads 64 * k_warps contiguous columns of each of its rows:
// runs along a row are what HBM streams fastest (2.80 TB/s in a load-only probe against
// 2.2-2.7 with the warps on separate rows). Token rows come through L1, which the SM's other
// blocks then hit. A warp computes tiles_per_warp row tiles, so each token load serves that many
// weight tiles; the warps' sums add up in shared memory in a fixed order (results do not depend
// on timing).
#include <string>
#include <type_traits>

#include "engine/cuda/common.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/skinny_gemm.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kMaxKWarps = 8;
constexpr int kMaxWarpTiles = 16;  // tiles_per_warp * k_warps: 32 KB of shared sums at most
constexpr int kLoadsPerThread = 8;  // 16-byte weight loads in flight per thread (more at 4 tiles)
constexpr int kChunkCols = 64;
constexpr int64_t kMinChunksPerWarp = 4;

__device__ __forceinline__ uint4 load_cached(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ uint4 swap_halves(uint4 v) {
  v.x = __shfl_xor_sync(0xffffffffu, v.x, 16);
  v.y = __shfl_xor_sync(0xffffffffu, v.y, 16);
  v.z = __shfl_xor_sync(0xffffffffu, v.z, 16);
  v.w = __shfl_xor_sync(0xffffffffu, v.w, 16);
  return v;
}

// MT row tiles per warp, NT tiles of 8 tokens; two blocks per SM up to 2 tiles per warp (128
// registers), one at 4. Every thread reaches the __syncthreads.
template <class T, class Y, int MT, int NT>
__global__ void __launch_bounds__(kMaxKWarps * 32, MT <= 2 ? 2 : 1)
    skinny_kernel(const T* __restrict__ w, int64_t rows, int64_t cols, const T* __restrict__ x, int n_tokens, Y* y,
                  bool accumulate, int64_t steps, bool dealt, bool evict_first) {
  constexpr int U = MT == 1 ? kLoadsPerThread / 4 : 1;  // chunks per batch
  extern __shared__ float red[];                          // [k_warps][MT][NT][4][32]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const bool low = g < 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * MT * 16;
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
  const int k_warps = static_cast<int>(blockDim.x) / 32;
  // The chunk of this warp's step t: dealt out in turn (the block reads 64 * k_warps contiguous
  // columns of its rows at each step) or a contiguous span per warp.
  const auto chunk_of = [&](int64_t t) { return dealt ? t * k_warps + warp : warp * steps + t; };
  const auto chunk_in = [&](int64_t t) { return t < steps && chunk_of(t) < chunks; };

  // Load i of a tile (i = 2 * (8-row half) + j): row 8 * (i / 2) + (low ? g + 4j : g - 4 + 4j),
  // column half (low ? j : 1 - j) of the chunk.
  const T* wr[MT][4];
  bool w_ok[MT][4];
  int w_half[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int j = i % 2;
    w_half[i] = low ? j : 1 - j;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int64_t r = m0 + mt * 16 + 8 * (i / 2) + (low ? g : g - 4) + 4 * j;
      w_ok[mt][i] = r < rows;
      wr[mt][i] = w + (w_ok[mt][i] ? r : 0) * cols + 32 * w_half[i] + 8 * q;
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

  using Batch = uint4[U][MT][4];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint64_t policy = evict_first ? evict_first_policy() : 0;
  const auto load_weights = [&](Batch& a, int64_t c) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t chunk = chunk_of(c + u);
        const bool in = chunk_in(c + u) && chunk * kChunkCols + 32 * w_half[i] + 8 * q < cols;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[u][mt][i] = in && w_ok[mt][i] ? load_stream(wr[mt][i] + chunk * kChunkCols, evict_first, policy) : zero;
        }
      }
    }
  };
  // Per chunk of batch c: its token loads, then the products with the weights in `a`.
  const auto multiply = [&](const Batch& a, int64_t c) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 b[NT][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t chunk = chunk_of(c + u);
        const bool in = chunk_in(c + u) && chunk * kChunkCols + 32 * h + 8 * q < cols;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          b[nt][h] = in && x_ok[nt] ? load_cached(xr[nt] + chunk * kChunkCols + 32 * h) : zero;
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // [8-row half][column half] of rows g and g + 8 after the swap.
        uint4 frag_src[2][2];
#pragma unroll
        for (int r8 = 0; r8 < 2; ++r8) {
          const uint4& first = a[u][mt][2 * r8];
          const uint4& second = a[u][mt][2 * r8 + 1];
          frag_src[r8][0] = low ? first : second;
          frag_src[r8][1] = swap_halves(low ? second : first);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t* lo = reinterpret_cast<const uint32_t*>(&frag_src[0][h]);
          const uint32_t* hi = reinterpret_cast<const uint32_t*>(&frag_src[1][h]);
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const uint32_t frag[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const uint32_t* bv = reinterpret_cast<const uint32_t*>(&b[nt][h]);
              mma<T>(acc[mt][nt], frag, bv[2 * s], bv[2 * s + 1]);
            }
          }
        }
      }
    }
  };

  // Weights are constant: the first batch is loaded before waiting for the previous kernel.
  Batch a0;
  load_weights(a0, 0);
  wait_for_predecessor();
  for (int64_t c = 0; c < steps; c += U) {
    if (c != 0) load_weights(a0, c);
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
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
  const int64_t per_warp = (chunks + c.k_warps - 1) / c.k_warps;
  const auto blocks = static_cast<unsigned>((rows + MT * 16 - 1) / (MT * 16));
  const size_t smem = static_cast<size_t>(c.k_warps) * MT * NT * 4 * 32 * sizeof(float);
  launch_kernel(skinny_kernel<T, Y, MT, NT>, blocks, c.k_warps * 32, smem, stream, static_cast<const T*>(w), rows,
                cols, static_cast<const T*>(x), static_cast<int>(n_tokens), static_cast<Y*>(y), accumulate, per_warp,
                c.dealt, weights_evict_first());
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

SkinnyConfig skinny_config(int64_t cols) {
  SkinnyConfig c;
  // One row tile per warp (more tiles per warp cut token loads but leave too few warps: 4 tiles
  // took gate_up at 20 tokens to 132 us against 97), the columns split over up to 8 warps while
  // each keeps a few batches of loads, dealt out in turn (0.1 ms a step faster than spans at 10
  // tokens).
  c.tiles_per_warp = 1;
  c.dealt = true;
  const int64_t chunks = (cols + kChunkCols - 1) / kChunkCols;
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
