// The tensor memory accelerator (TMA, compute capability 9.0+) as the staged and band GEMMs use
// it: a 2-D tensor map of a row-major f16/bf16 matrix read in boxes of 64 columns (128 bytes, the
// swizzle span) x `box_rows` rows, written to shared memory 128-byte swizzled (16-byte chunk c of
// a box row r lands at chunk c ^ (r % 8), the box starting on a 1,024-byte boundary); what lies
// outside the matrix is written as zeros. A stage's copies are counted on an mbarrier.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "engine/cuda/common.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/mma.cuh"
#include "kernelllm/engine/safetensors.h"

// Every instruction below needs compute capability 9.0. In the machine code for older GPUs
// (whose kernel plan never launches a kernel that uses them) each is a trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KLLM_HOPPER_ASM(...) __trap()
#else
#define KLLM_HOPPER_ASM(...) asm volatile(__VA_ARGS__)
#endif

namespace kernelllm::cuda {

inline constexpr int kTmaBoxCols = 64;

// `map` for rows x cols elements of `type` (f16 or bf16) at `base` (16-byte aligned, cols a
// multiple of 8), boxes of kTmaBoxCols x box_rows (1..256). False when the driver has no entry
// point for it or cannot describe the matrix.
bool tma_map_2d(CUtensorMap& map, DType type, const void* base, int64_t rows, int64_t cols, int box_rows);

// Asks the tensor map (a kernel parameter) into the cache ahead of its first copy.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  KLLM_HOPPER_ASM("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Box (col, row) of `map` into shared memory at `dst`, counted on `bar`.
__device__ __forceinline__ void tma_box(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  KLLM_HOPPER_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(map), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}

// tma_box for data a pass reads once (weights, under common.cuh's weights_evict_first; the forks'
// own K/V rows): with `evict_first`, under device_types.cuh's L2 evict-first policy.
__device__ __forceinline__ void tma_box_once(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar,
                                             bool evict_first) {
  if (!evict_first) {
    tma_box(dst, map, col, row, bar);
    return;
  }
  const uint64_t policy = evict_first_policy();
  KLLM_HOPPER_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(col), "r"(row), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  KLLM_HOPPER_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// Arrives on `bar` and makes its current phase wait for `bytes` more of copies.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  KLLM_HOPPER_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  KLLM_HOPPER_ASM(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// After mbar_init, before any copy is counted on the barriers.
__device__ __forceinline__ void mbar_init_fence() {
  KLLM_HOPPER_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Between shared-memory reads by the threads (generic proxy) and a TMA copy (async proxy) that
// overwrites the same bytes.
__device__ __forceinline__ void async_proxy_fence() { KLLM_HOPPER_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The first 1,024-byte boundary at or after p in shared memory (a swizzled box's alignment; ask
// for 1,024 bytes more than the boxes need).
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) { return p + ((1024 - smem_addr(p) % 1024) % 1024); }

// Where 16-byte chunk c (0..7) of row r lies in a 128-byte swizzled box, in 2-byte elements.
__device__ __forceinline__ int swizzled_elem(int r, int c) { return (r * 8 + (c ^ (r & 7))) * 8; }

}  // namespace kernelllm::cuda
