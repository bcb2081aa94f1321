// Tensor-core building blocks shared by the attention kernels (nvcc only): mma.sync
// m16n8k16 with fp32 accumulators for bf16/f16 operands, ldmatrix from shared memory, packing
// two floats into a b16 pair (rounded, or split into high and low halves), cp.async copies of 16
// bytes (zero-filled when not wanted), and the online-softmax step over accumulator rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/device_types.cuh"

namespace kernelllm::cuda {

// c += a . b for one 16x8 tile: a is 16x16 (row-major fragments), b is 16x8 (column fragments).
// Not volatile: a pure register operation, so the compiler may interleave independent products
// (with volatile, each tile's chain of dependent mma ran back to back at full latency).
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two T values as one 32-bit pair (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack(T lo, T hi) {
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&lo)) |
         (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&hi)) << 16);
}

// (x0, x1) as a packed pair in T (hi) and the packed pair of what rounding lost (lo): hi + lo
// carries about 16 bits of each float, so products of both halves match fp32 inputs closely.
template <class T>
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const T h0 = from_f32<T>(x0), h1 = from_f32<T>(x1);
  hi = pack<T>(h0, h1);
  lo = pack<T>(from_f32<T>(x0 - to_f32(h0)), from_f32<T>(x1 - to_f32(h1)));
}

// (lo, hi) rounded to T and packed as one 32-bit pair (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four (two) 8x8 b16 matrices from shared memory; lanes 8i..8i+7 give matrix i's row addresses.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem)));
}
// The same, each matrix transposed (B operands from a [k][n] row-major tile).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// 16 bytes global -> shared without passing through registers; with `load` false nothing is
// read and the 16 bytes are zero.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool load) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(load ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One tile's step of the online softmax over mma accumulator rows (base-2 scores): this thread
// holds rows gq (r = 0) and gq + 8 (r = 1) of a 16-row tile, whose 4 threads tq = 0..3 hold the
// tile's columns. From each row's tile maximum (this thread's part in, the row's out): the new
// running maximum m, the base the tile's scores are exponentiated against (0 while the row has
// seen only -inf), the factor `corr` the running sum l (rescaled here) and the output take.
__device__ __forceinline__ void online_softmax_step(float (&row_max)[2], float (&m)[2], float (&l)[2],
                                                    float (&corr)[2], float (&base)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    const float m_new = fmaxf(m[r], row_max[r]);
    base[r] = m_new == -INFINITY ? 0.0f : m_new;
    corr[r] = exp2f(m[r] - base[r]);
    m[r] = m_new;
    l[r] *= corr[r];
  }
}

// The output accumulators of rows gq (r = 0) and gq + 8 (r = 1) times their rows' factors.
template <int ND>
__device__ __forceinline__ void rescale_rows(float (&o)[ND][4], const float (&corr)[2]) {
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) {
    o[nd][0] *= corr[0];
    o[nd][1] *= corr[0];
    o[nd][2] *= corr[1];
    o[nd][3] *= corr[1];
  }
}

// The rest of a tile's online-softmax step once its scores are in (base-2 units, -inf where
// masked) and this thread's part of each row's tile maximum is in row_max: the running m and l
// updated, the output accumulators o (rows gq, gq + 8 as in the scores) rescaled, and the scores
// replaced by their weights exp2(s - base), summed into l.
template <int NB, int ND>
__device__ __forceinline__ void softmax_tile(float (&s)[NB][4], float (&row_max)[2], float (&m)[2], float (&l)[2],
                                             float (&o)[ND][4]) {
  float corr[2], base[2];
  online_softmax_step(row_max, m, l, corr, base);
  rescale_rows(o, corr);
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nb][e] = exp2f(s[nb][e] - base[e >> 1]);
      l[e >> 1] += s[nb][e];
    }
  }
}

}  // namespace kernelllm::cuda
