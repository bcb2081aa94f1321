// Helpers for the CUDA tests: host bf16/f16 rounding, device upload/download, the normalized
// error ||a - b|| / ||b||, seeded random vectors.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cuda/common.cuh"

namespace kernelllm::cuda_test {

// A test backend's kernel plan text: `choices` on top of KERNELLLM_CUDA_PLAN, so that the suite
// run with KERNELLLM_CUDA_PLAN=portable (the non-Hopper plan) keeps it in every backend.
inline std::string test_plan(const std::string& choices) {
  const char* env = std::getenv("KERNELLLM_CUDA_PLAN");
  const std::string base = env != nullptr ? env : "";
  if (base.empty()) return choices;
  return choices.empty() ? base : base + "," + choices;
}

inline uint16_t to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline uint16_t to_f16_bits(float f) {
  // Round-to-nearest-even through the hardware-independent path: normal range only (tests use |x| < 100).
  if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0;
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);  // flush tiny values (not produced by the tests)
  uint32_t m = mant >> 13;
  const uint32_t rest = mant & 0x1fffu;
  uint32_t e = static_cast<uint32_t>(exp);
  if (rest > 0x1000u || (rest == 0x1000u && (m & 1u))) {
    if (++m == 0x400u) { m = 0; ++e; }
  }
  return static_cast<uint16_t>(sign | (e << 10) | m);
}

// Rounds `v` to `t` in place and returns the element bytes for the device.
inline std::vector<std::byte> encode(std::vector<float>& v, DType t) {
  std::vector<std::byte> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
      continue;
    }
    const uint16_t bits = t == DType::bf16 ? to_bf16_bits(v[i]) : to_f16_bits(v[i]);
    v[i] = t == DType::bf16 ? cpu::bf16_to_float(bits) : cpu::f16_to_float(bits);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline cuda::DeviceBuffer upload(const void* data, size_t bytes) {
  cuda::DeviceBuffer b;
  EXPECT_TRUE(b.allocate(bytes, "test").ok());
  EXPECT_EQ(cudaMemcpy(b.get(), data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}
template <class T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  return upload(v.data(), v.size() * sizeof(T));
}

// Downloads n elements of type t as floats, after a device sync that must succeed.
inline std::vector<float> download(const cuda::DeviceBuffer& b, size_t n, DType t = DType::f32) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<std::byte> raw(n * dtype_size(t));
  EXPECT_EQ(cudaMemcpy(raw.data(), b.get(), raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::f32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      out[i] = t == DType::bf16 ? cpu::bf16_to_float(bits) : cpu::f16_to_float(bits);
    }
  }
  return out;
}

// A buffer of `bytes` filled with NaN-pattern bytes, so unwritten outputs fail the checks.
inline cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer b;
  EXPECT_TRUE(b.allocate(bytes, "test").ok());
  EXPECT_EQ(cudaMemset(b.get(), 0xff, bytes), cudaSuccess);
  return b;
}

inline double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace kernelllm::cuda_test
