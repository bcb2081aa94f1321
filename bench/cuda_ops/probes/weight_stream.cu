// Weight-streaming probe for item 21's open question: how fast do warps stream a weight matrix
// when they read it the way mma fragments want it (a warp owns 16 rows; each load instruction
// takes 64 bytes of 8 rows) against the GEMV's way (each load instruction takes 512 contiguous
// bytes of one row)? No arithmetic beyond an XOR fold, so only the access pattern, the loads in
// flight per thread (U batches of 16 bytes per row) and the warps per SM differ. The matrix has
// gate_up's shape (28,672 x 4,096 bf16, 235 MB; two copies alternate, far past the 50 MB L2).
// The staged layout of item 21 is "tile" with the block's 8 warps on 8 tiles of one column span
// (one of `splits` spans); shared memory asked per block caps the blocks per SM as the staged
// kernel's did.
// Item 27 added two orders that keep mma fragments' rows per lane: "quad" (each instruction
// takes whole 128-byte lines of 4 rows, one shuffle then gives each lane its own rows; blocks
// as "tile") and "dealt" (a block's 8 warps on one 16-row tile, the columns dealt out in turn, so
// the block reads 8 x 128 bytes in a row of each of its rows per step; the skinny GEMM's order).
// The weights are read with the engine's own load_stream (engine/cuda/device_types.cuh); the
// results at cdd696f came from a build with a copy of it, the same instruction.
// Build and run on the device, from the repo root:
//   nvcc -std=c++20 -O3 -arch=sm_90a -Isrc -Iinclude bench/cuda_ops/probes/weight_stream.cu -o ws && ./ws
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/cuda/device_types.cuh"

namespace {

using kernelllm::cuda::load_stream;

constexpr int kWarps = 8;
constexpr int64_t kRows = 28672, kCols = 4096;

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Block b: band b / splits, span b % splits; warp w: the band's tile w (16 rows). Lane (g, q)
// reads 16 bytes at column 32c + 8q of rows g and g + 8, U chunks c per batch.
template <int U>
__global__ void __launch_bounds__(kWarps * 32) tile_kernel(const uint16_t* w, int splits, uint32_t* out) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t band = blockIdx.x / splits, split = blockIdx.x % splits;
  const int64_t span = kCols / splits;
  const uint16_t* r0 = w + ((band * kWarps + warp) * 16 + g) * kCols + split * span + 8 * q;
  const uint16_t* r1 = r0 + 8 * kCols;
  uint32_t acc = 0;
  for (int64_t c = 0; c < span / 32; c += U) {
    uint4 a[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u][0] = load_stream(r0 + (c + u) * 32);
      a[u][1] = load_stream(r1 + (c + u) * 32);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(a[u][0]) ^ fold(a[u][1]);
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // keeps the loads; practically never true
}

// Block b: rows (b / splits) * 8 .. + 7, span b % splits; warp w: one row; lane l reads 16 bytes
// at column 256c + 8l, U chunks c per batch (the GEMV's 512 contiguous bytes per instruction).
template <int U>
__global__ void __launch_bounds__(kWarps * 32) row_kernel(const uint16_t* w, int splits, uint32_t* out) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t group = blockIdx.x / splits, split = blockIdx.x % splits;
  const int64_t span = kCols / splits;
  const uint16_t* r = w + (group * kWarps + warp) * kCols + split * span + 8 * lane;
  uint32_t acc = 0;
  for (int64_t c = 0; c < span / 256; c += U) {
    uint4 a[U];
#pragma unroll
    for (int u = 0; u < U; ++u) a[u] = load_stream(r + (c + u) * 256);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(a[u]);
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

// Block b: band b / splits, span b % splits; warp w: the band's tile w (16 rows), as "tile", but
// each load instruction takes whole 128-byte lines of 4 rows: per 64-column chunk, lanes g < 4
// read the first half of row g (and g + 8) and the second half of row g + 4 (g + 12), lanes
// g >= 4 the second half of row g - 4 (g + 4) and the first half of row g (g + 8). With SHFL, one
// shuffle per register between lanes l and l ^ 16 then gives every lane (g, q) both halves of
// its own rows g and g + 8, the order mma fragments want.
template <int U, bool SHFL>
__global__ void __launch_bounds__(kWarps * 32) quad_kernel(const uint16_t* w, int splits, uint32_t* out) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const bool low = g < 4;
  const int64_t band = blockIdx.x / splits, split = blockIdx.x % splits;
  const int64_t span = kCols / splits;
  const uint16_t* base = w + (band * kWarps + warp) * 16 * kCols + split * span + 8 * q;
  // [instruction]: I0 rows 0-3, I1 rows 4-7, I2 rows 8-11, I3 rows 12-15.
  const uint16_t* r[4];
  r[0] = base + (low ? g : g - 4) * kCols + (low ? 0 : 32);
  r[1] = base + (low ? g + 4 : g) * kCols + (low ? 32 : 0);
  r[2] = r[0] + 8 * kCols;
  r[3] = r[1] + 8 * kCols;
  uint32_t acc = 0;
  for (int64_t c = 0; c < span / 64; c += U) {
    uint4 a[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[u][i] = load_stream(r[i] + (c + u) * 64);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint4 own = low ? a[u][2 * h] : a[u][2 * h + 1];
        uint4 other = low ? a[u][2 * h + 1] : a[u][2 * h];
        if constexpr (SHFL) {
          other.x = __shfl_xor_sync(0xffffffffu, other.x, 16);
          other.y = __shfl_xor_sync(0xffffffffu, other.y, 16);
          other.z = __shfl_xor_sync(0xffffffffu, other.z, 16);
          other.w = __shfl_xor_sync(0xffffffffu, other.w, 16);
        }
        acc ^= fold(own) + 3u * fold(other);
      }
    }
  }
  if (acc == 0x9e3779b9u) out[0] = acc;
}

// "quad" loads with the block's 8 warps on one 16-row tile, the columns dealt out in turn:
// warp w takes chunks w, w + 8, ... of CW columns (64: whole lines, 32: the "tile" order's
// half lines), so at each step the block reads 8 * CW contiguous columns of each of its rows.
template <int CW>
__global__ void __launch_bounds__(kWarps * 32) dealt_kernel(const uint16_t* w, int splits, uint32_t* out) {
  constexpr int L = CW == 64 ? 4 : 2;  // loads per chunk
  constexpr int U = 8 / L;             // chunks per batch: 8 loads in flight
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const bool low = g < 4;
  const uint16_t* base = w + static_cast<int64_t>(blockIdx.x) * 16 * kCols + warp * CW + 8 * q;
  const uint16_t* r[L];
  if constexpr (CW == 64) {
    r[0] = base + (low ? g : g - 4) * kCols + (low ? 0 : 32);
    r[1] = base + (low ? g + 4 : g) * kCols + (low ? 32 : 0);
    r[2] = r[0] + 8 * kCols;
    r[3] = r[1] + 8 * kCols;
  } else {
    r[0] = base + g * kCols;
    r[1] = r[0] + 8 * kCols;
  }
  uint32_t acc = 0;
  for (int64_t c = 0; c < kCols / (8 * CW); c += U) {
    uint4 a[U][L];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < L; ++i) a[u][i] = load_stream(r[i] + (c + u) * 8 * CW);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < L; ++i) acc ^= fold(a[u][i]) * (2u * i + 1u);
    }
  }
  (void)splits;  // one span: the block covers whole rows
  if (acc == 0x9e3779b9u) out[0] = acc;
}

template <class K>
float time_us(K kernel, unsigned blocks, size_t smem, const uint16_t* const* w, int splits, uint32_t* out) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ts;
  for (int i = 0; i < 25; ++i) {
    cudaEventRecord(a);
    kernel<<<blocks, kWarps * 32, smem>>>(w[i % 2], splits, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 5) ts.push_back(ms * 1e3f);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace

int main() {
  const size_t bytes = static_cast<size_t>(kRows * kCols) * 2;
  uint16_t* w[2];
  uint32_t* out = nullptr;
  for (auto& p : w) {
    cudaMalloc(&p, bytes);
    cudaMemset(p, 1, bytes);
  }
  cudaMalloc(&out, 4);
  const double gb = static_cast<double>(bytes) / 1e9;
  // Shared memory per block for 8 / 3 / 2 blocks of 8 warps per SM (registers allow 8).
  const size_t smem_for[] = {0, 70 * 1024, 100 * 1024};
  const int blocks_per_sm[] = {8, 3, 2};
  for (int o = 0; o < 3; ++o) {
    const auto dealt_blocks = static_cast<unsigned>(kRows / 16);
    const float d64 = time_us(dealt_kernel<64>, dealt_blocks, smem_for[o], w, 1, out);
    const float d32 = time_us(dealt_kernel<32>, dealt_blocks, smem_for[o], w, 1, out);
    std::printf("dealt %d blocks/SM (%5u blocks): 64-column chunks %6.1f us %4.2f TB/s | 32-column chunks %6.1f "
                "%4.2f\n",
                blocks_per_sm[o], dealt_blocks, d64, gb / d64 * 1e3, d32, gb / d32 * 1e3);
    for (int splits : {1, 2, 4, 8}) {
      const auto tile_blocks = static_cast<unsigned>(kRows / (16 * kWarps) * splits);
      const auto row_blocks = static_cast<unsigned>(kRows / kWarps * splits);
      const float t1 = time_us(tile_kernel<1>, tile_blocks, smem_for[o], w, splits, out);
      const float t2 = time_us(tile_kernel<2>, tile_blocks, smem_for[o], w, splits, out);
      const float t4 = time_us(tile_kernel<4>, tile_blocks, smem_for[o], w, splits, out);
      const float t8 = time_us(tile_kernel<8>, tile_blocks, smem_for[o], w, splits, out);
      std::printf("tile  %d blocks/SM splits %d (%5u blocks): U=1 %6.1f us %4.2f TB/s | U=2 %6.1f %4.2f | U=4 %6.1f "
                  "%4.2f | U=8 %6.1f %4.2f\n",
                  blocks_per_sm[o], splits, tile_blocks, t1, gb / t1 * 1e3, t2, gb / t2 * 1e3, t4, gb / t4 * 1e3, t8,
                  gb / t8 * 1e3);
      const float q1 = time_us(quad_kernel<1, true>, tile_blocks, smem_for[o], w, splits, out);
      const float q2 = time_us(quad_kernel<2, true>, tile_blocks, smem_for[o], w, splits, out);
      const float q1n = time_us(quad_kernel<1, false>, tile_blocks, smem_for[o], w, splits, out);
      std::printf("quad  %d blocks/SM splits %d (%5u blocks): U=1 %6.1f us %4.2f TB/s | U=2 %6.1f %4.2f | U=1 no "
                  "shuffle %6.1f %4.2f\n",
                  blocks_per_sm[o], splits, tile_blocks, q1, gb / q1 * 1e3, q2, gb / q2 * 1e3, q1n, gb / q1n * 1e3);
      if (4096 / splits / 256 < 2) continue;
      const float r1 = time_us(row_kernel<1>, row_blocks, smem_for[o], w, splits, out);
      const float r2 = time_us(row_kernel<2>, row_blocks, smem_for[o], w, splits, out);
      std::printf("row   %d blocks/SM splits %d (%5u blocks): U=1 %6.1f us %4.2f TB/s | U=2 %6.1f %4.2f\n",
                  blocks_per_sm[o], splits, row_blocks, r1, gb / r1 * 1e3, r2, gb / r2 * 1e3);
    }
  }
  const cudaError_t err = cudaGetLastError();
  std::printf("cuda: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
