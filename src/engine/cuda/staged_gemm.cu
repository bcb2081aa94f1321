// The staged GEMM; see staged_gemm.cuh.
//
// Why: a kernel that loads mma fragments straight from global memory reads 8 rows x 64 bytes per
// warp instruction, and that pattern streams weights at ~2.2-2.7 TB/s on the H100 where 512-byte
// row runs reach ~2.9-3.0 (a load-only probe on gate_up's 235 MB). Here the weights go through shared
// memory by the tensor memory accelerator (TMA): one thread asks for boxes of 128 rows x 64
// columns (the hardware writes them 128-byte swizzled and zero-fills what lies outside the
// matrix) and the stage's mbarrier says when they have landed; ldmatrix reads the fragments
// back out. (cp.async copies of 16 bytes per thread streamed at most ~2.35 TB/s even with no
// arithmetic at all.) The few token rows come by cp.async.
//
// Work: the matrix is cut into bands of 128 rows and each band into stages of BK columns; the
// units (band, stage) are numbered band by band and block b of G takes units [bU/G, (b+1)U/G).
// A block runs its units through an S-stage ring (S x BK = 512 columns of 128 weight rows and of
// the NT x 8 token rows: 160 KB at NT = 4), the next S - 1 units in flight. Warp w multiplies rows 16w .. 16w + 15 of
// the band by all tokens (mma.sync m16n8k16, A = weights, B = tokens, fp32 accumulators).
// Shared memory holds each row's 16-byte chunks at chunk ^ (row % 8) (within each 64-column box
// for the weights: TMA's 128-byte swizzle), so the 8 rows an ldmatrix phase reads fall in
// different banks.
//
// A band that lies inside one block's units is written by that block. A band shared by blocks
// b0 .. b1 (a block shares at most its first and its last band): each writes its partial sums to
// its slot (0: its first band, 1: its last), fences, and counts itself in on the band's counter;
// the one that arrives last adds the slots in block order b0 .. b1 and writes the band, so the
// sum is the same whoever arrives last. It sets the counter back to zero for the next call.
#include <algorithm>
#include <string>
#include <type_traits>

#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/staged_gemm.cuh"
#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarps = static_cast<int>(kStagedBandRows / 16);
constexpr int kThreads = kWarps * 32;
constexpr int kBM = static_cast<int>(kStagedBandRows);
constexpr int kRingCols = 512;  // S x BK
constexpr int kMaxNT = static_cast<int>(kStagedMaxTokens / 8);
constexpr int64_t kSlotFloats = int64_t{kWarps} * kMaxNT * 4 * 32;  // one block's partial sums of a band
constexpr int kBoxCols = kTmaBoxCols;  // TMA box: 64 columns x kBM rows
constexpr int kBoxBytes = kBM * kBoxCols * 2;

// The (band, stage) units of a rows x cols matrix at bk columns per stage (the kernel numbers
// them the same way).
__host__ __device__ inline int64_t units_of(int64_t rows, int64_t cols, int64_t bk) {
  return (rows + kBM - 1) / kBM * ((cols + bk - 1) / bk);
}

// Chunk (row r, chunk c) of a stage tile with CPR 16-byte chunks per row, in 16-byte units.
template <int CPR>
__device__ __forceinline__ int swizzled(int r, int c) {
  return r * CPR + (c ^ (r & 7));
}

template <class T, class Y, int NT, int BK>
__global__ void __launch_bounds__(kThreads, 1)
    staged_kernel(const __grid_constant__ CUtensorMap wmap, int64_t rows, int64_t cols, const T* __restrict__ x,
                  int n_tokens, Y* y, bool accumulate, float* partials, int32_t* counters, bool evict_first) {
  constexpr int S = kRingCols / BK;  // stages in the ring
  constexpr int CPR = BK / 8;        // 16-byte chunks per stage row
  constexpr int XR = NT * 8;         // token rows
  constexpr int kStageElems = (kBM + XR) * BK;
  static_assert(S >= 2 && CPR >= 8 && BK % kBoxCols == 0, "two stages or more, whole boxes per stage");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1,024 bytes: the ring starts on such a boundary.
  T* const ring = reinterpret_cast<T*>(smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024));
  __shared__ int s_last;
  __shared__ __align__(8) uint64_t full[S];  // stage s's weight boxes have landed (phase per fill)

  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t ks = (cols + BK - 1) / BK;  // stages per band
  const int64_t units = units_of(rows, cols, BK);
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t u_begin = b * units / G, u_end = (b + 1) * units / G;

  // Weights: thread 0 asks for the stage's boxes; tokens: every thread copies its chunks.
  const auto load_unit = [&](int64_t u, int slot, bool weights, bool tokens) {
    const int64_t row0 = u / ks * kBM, k0 = u % ks * BK;
    T* sw = ring + slot * kStageElems;
    T* sx = sw + kBM * BK;
    if (weights && tid == 0) {
      mbar_expect_tx(&full[slot], BK / kBoxCols * kBoxBytes);
#pragma unroll
      for (int j = 0; j < BK / kBoxCols; ++j) {
        tma_box_once(sw + j * kBM * kBoxCols, &wmap, static_cast<int>(k0 + j * kBoxCols), static_cast<int>(row0),
                     &full[slot], evict_first);
      }
    }
    if (tokens) {
      for (int i = tid; i < XR * CPR; i += kThreads) {
        const int r = i / CPR, c = i % CPR;
        const int64_t col = k0 + c * 8;
        const bool ok = r < n_tokens && col < cols;
        cp_async16(sx + swizzled<CPR>(r, c) * 8, ok ? x + r * cols + col : x, ok);
      }
    }
  };

  float acc[NT][4];
  const auto clear = [&] {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  };
  clear();

  // This thread's outputs: rows g and g + 8 of the warp's 16, tokens 2q and 2q + 1 of each tile.
  const auto write_band = [&](int64_t band, const float (&v)[NT][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = band * kBM + warp * 16 + lane / 4 + (i >= 2 ? 8 : 0);
        const int n = nt * 8 + 2 * (lane % 4) + (i & 1);
        if (row < rows && n < n_tokens) {
          Y* out = y + static_cast<int64_t>(n) * rows + row;
          if constexpr (std::is_same_v<Y, float>) {
            *out = accumulate ? *out + v[nt][i] : v[nt][i];
          } else {
            *out = from_f32<Y>(v[nt][i]);
          }
        }
      }
    }
  };
  const auto slot_floats = [&](int64_t blk, int64_t band) {
    return partials + (blk * 2 + (band == blk * units / G / ks ? 0 : 1)) * kSlotFloats;
  };

  if (tid == 0) {
    for (int i = 0; i < S; ++i) mbar_init(&full[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  // Weights are constant: the first stages' weight copies are issued before waiting for the
  // previous kernel (launch.cuh); the tokens it wrote only after.
  for (int i = 0; i < S - 1; ++i) {
    if (u_begin + i < u_end) load_unit(u_begin + i, i, true, false);
  }
  wait_for_predecessor();
  for (int i = 0; i < S - 1; ++i) {
    if (u_begin + i < u_end) load_unit(u_begin + i, i, false, true);
    cp_async_commit();
  }

  for (int64_t u = u_begin; u < u_end; ++u) {
    const int i = static_cast<int>(u - u_begin);
    cp_async_wait<S - 2>();  // unit u's token copies (this thread's) have landed ...
    mbar_wait(&full[i % S], static_cast<unsigned>(i / S) & 1u);  // ... and its weight boxes
    __syncthreads();  // everyone's tokens; the slot refilled below was read last iteration
    if (u + S - 1 < u_end) {
      // The slot's last reads were ldmatrix (generic proxy); TMA writes through the async proxy.
      if (tid == 0) async_proxy_fence();
      load_unit(u + S - 1, (i + S - 1) % S, true, true);
    }
    cp_async_commit();

    const T* sw = ring + (i % S) * kStageElems;
    const T* sx = sw + kBM * BK;
#pragma unroll
    for (int kk = 0; kk < BK / 32; ++kk) {  // 32 columns: 4 chunks, 2 mma k-steps
      uint32_t a[2][4];
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        // Lane l addresses row l % 8 of matrix l / 8: rows +8 for matrices 1 and 3, chunk +1 for 2
        // and 3; chunk c of the stage is chunk c % 8 of box c / 8.
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int c = 4 * kk + 2 * s + (lane >> 4);
        ldmatrix_x4(a[s], sw + (c / 8) * kBM * kBoxCols + swizzled<8>(r, c % 8) * 8);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        // Matrices 0..3: token rows 8nt .. 8nt + 7, chunks 4kk .. 4kk + 3 (b0, b1 of each k-step).
        uint32_t bq[4];
        ldmatrix_x4(bq, sx + swizzled<CPR>(nt * 8 + (lane & 7), 4 * kk + (lane >> 3)) * 8);
        mma<T>(acc[nt], a[0], bq[0], bq[1]);
        mma<T>(acc[nt], a[1], bq[2], bq[3]);
      }
    }

    const int64_t band = u / ks;
    if (u + 1 != u_end && (u + 1) % ks != 0) continue;
    // The band's last unit in this block.
    if (u_begin <= band * ks && u + 1 == (band + 1) * ks) {
      write_band(band, acc);
      clear();
      continue;
    }
    float* mine = slot_floats(b, band);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[((warp * NT + nt) * 4 + e) * 32 + lane] = acc[nt][e];
    }
    __threadfence();
    __syncthreads();
    // Blocks b0 .. b1 hold the band's units: block_of(u) = ((u + 1) G - 1) / U.
    const int64_t b0 = ((band * ks + 1) * G - 1) / units, b1 = ((band + 1) * ks * G - 1) / units;
    if (tid == 0) s_last = atomicAdd(counters + band, 1) == static_cast<int>(b1 - b0);
    __syncthreads();
    if (s_last) {
      __threadfence();
      float sum[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) sum[nt][0] = sum[nt][1] = sum[nt][2] = sum[nt][3] = 0.0f;
      for (int64_t blk = b0; blk <= b1; ++blk) {
        const float* p = slot_floats(blk, band);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) sum[nt][e] += __ldcg(p + ((warp * NT + nt) * 4 + e) * 32 + lane);
        }
      }
      write_band(band, sum);
      if (tid == 0) counters[band] = 0;
    }
    clear();
  }
  cp_async_wait<0>();
}

// The ring, and 1 KB to align it.
size_t smem_bytes(int nt) { return static_cast<size_t>(kBM + nt * 8) * kRingCols * 2 + 1024; }

template <class T, class Y, int NT, int BK>
void launch(const CUtensorMap& map, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
            bool accumulate, const StagedScratch& s, cudaStream_t stream) {
  const auto kernel = staged_kernel<T, Y, NT, BK>;
  allow_dynamic_smem<staged_kernel<T, Y, NT, BK>>(smem_bytes(NT));
  const int64_t units = units_of(rows, cols, BK);
  // Every block must own a unit (an empty block between a band's pieces would never count in).
  const auto grid = static_cast<unsigned>(std::min(s.blocks, units));
  launch_kernel(kernel, grid, kThreads, smem_bytes(NT), stream, map, rows, cols, static_cast<const T*>(x),
                static_cast<int>(n_tokens), static_cast<Y*>(y), accumulate, s.partials, s.counters,
                weights_evict_first());
}

template <class T, class Y>
void dispatch(int bk, const CUtensorMap& map, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
              bool accumulate, const StagedScratch& s, cudaStream_t stream) {
  const auto go = [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    if (bk == 256) {
      launch<T, Y, NT, 256>(map, rows, cols, x, n_tokens, y, accumulate, s, stream);
    } else {
      launch<T, Y, NT, 128>(map, rows, cols, x, n_tokens, y, accumulate, s, stream);
    }
  };
  switch ((n_tokens + 7) / 8) {
    case 1: go(std::integral_constant<int, 1>{}); break;
    case 2: go(std::integral_constant<int, 2>{}); break;
    case 3: go(std::integral_constant<int, 3>{}); break;
    default: go(std::integral_constant<int, 4>{}); break;
  }
}

// false when the weights' tensor map cannot be made (no driver entry point, or a matrix TMA
// cannot describe).
bool run(const StagedConfig& c, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
         int64_t n_tokens, void* y, DType y_type, bool accumulate, const StagedScratch& s, cudaStream_t stream) {
  if (rows <= 0) return true;
  CUtensorMap map;
  if (!tma_map_2d(map, type, w, rows, cols, kBM)) return false;
  const auto with_t = [&](auto t) {
    using T = decltype(t);
    if (y_type == DType::f32) {
      dispatch<T, float>(c.stage_cols, map, rows, cols, x, n_tokens, y, accumulate, s, stream);
    } else {
      dispatch<T, T>(c.stage_cols, map, rows, cols, x, n_tokens, y, false, s, stream);
    }
  };
  if (type == DType::bf16) {
    with_t(__nv_bfloat16{});
  } else {
    with_t(__half{});
  }
  return true;
}

}  // namespace

int64_t staged_partial_floats(int64_t blocks) { return blocks * 2 * kSlotFloats; }
int64_t staged_counter_count(int64_t rows) { return (rows + kBM - 1) / kBM; }

bool staged_gemm(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, void* y,
                 DType y_type, bool accumulate, const StagedScratch& scratch, cudaStream_t stream) {
  return run(StagedConfig{}, type, w, rows, cols, x, n_tokens, y, y_type, accumulate, scratch, stream);
}

Status staged_gemm_with_config(const StagedConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                               const void* x, int64_t n_tokens, void* y, DType y_type, bool accumulate,
                               const StagedScratch& scratch, cudaStream_t stream) {
  if (config.stage_cols != 128 && config.stage_cols != 256) {
    return error(ErrorCode::invalid_argument,
                 "staged gemm layout: expected 128 or 256 columns per stage, found " +
                     std::to_string(config.stage_cols));
  }
  if (!staged_supported(type, cols, n_tokens) || rows < 0) {
    return error(ErrorCode::invalid_argument,
                 "staged gemm shape: expected f16/bf16 weights, rows >= 0, cols a positive multiple of 8 and 1.." +
                     std::to_string(kStagedMaxTokens) + " tokens, found " + std::string(dtype_name(type)) + ", rows " +
                     std::to_string(rows) + ", cols " + std::to_string(cols) + ", tokens " + std::to_string(n_tokens));
  }
  if (y_type != DType::f32 && (y_type != type || accumulate)) {
    return error(ErrorCode::invalid_argument,
                 "staged gemm output: expected f32 (fresh or accumulated) or the weights' dtype (fresh), found " +
                     std::string(dtype_name(y_type)) + (accumulate ? " accumulated" : ""));
  }
  if (rows > 0 && (scratch.blocks < 1 || scratch.partials == nullptr || scratch.counters == nullptr)) {
    return error(ErrorCode::invalid_argument, "staged gemm scratch: expected partials, counters and 1 or more blocks");
  }
  if (!run(config, type, w, rows, cols, x, n_tokens, y, y_type, accumulate, scratch, stream)) {
    return error(ErrorCode::internal, "staged gemm: the driver could not describe the weights as a TMA tensor (" +
                                          std::to_string(rows) + " x " + std::to_string(cols) + ")");
  }
  return Status::ok_status();
}

}  // namespace kernelllm::cuda
