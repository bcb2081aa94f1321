// Code compiled both by the host compiler and by nvcc for the device (sample_block.h, philox.h):
// KLLM_HD marks such functions, and the float helpers below round every operation on its own,
// so that host and device compute the same bits (nvcc would otherwise fuse a * b + c into one
// FMA where the host compiler does not; fma_rn says where a fused one is meant).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define KLLM_HD __host__ __device__ __forceinline__
#else
#define KLLM_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define KLLM_UNROLL _Pragma("unroll")  // a loop of constant trip count, unrolled on the device
#else
#define KLLM_UNROLL
#endif

namespace kernelllm::hd {

KLLM_HD uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KLLM_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

KLLM_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

KLLM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

KLLM_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c rounded once.
KLLM_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}

// To the nearest integer, ties to even.
KLLM_HD float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return nearbyintf(x);
#endif
}

}  // namespace kernelllm::hd
