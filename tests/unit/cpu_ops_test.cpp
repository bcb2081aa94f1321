// CPU backend kernels: f16/bf16 decoding, the blocked matmul against a double-precision
// reference for every weight dtype, RMSNorm, RoPE frequencies (default and llama3) and rotation.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "engine/cpu/ops.h"

namespace kernelllm::cpu {
namespace {

TEST(CpuOps, HalfAndBfloatDecodeKnownValues) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_float(0x3555), 0.25f * (1.0f + 341.0f / 1024.0f));  // exponent 13, mantissa 0x155
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

uint16_t to_bf16(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }  // truncation
uint16_t to_f16(float f) {
  // Test values are multiples of 2^-10 in [-2, 2): exact in f16.
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (f == 0.0f) return static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exp = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((bits >> 13) & 0x3ffu));
}

TEST(CpuOps, MatmulMatchesReferenceForEveryDtypeAndTokenCount) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> q(-1024, 1023);
  const int64_t rows = 37, cols = 53;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = static_cast<float>(q(rng)) / 1024.0f;
  std::vector<uint16_t> w_bf16, w_f16;
  for (float v : w) {
    w_bf16.push_back(to_bf16(v));
    w_f16.push_back(to_f16(v));
  }
  // f16 is exact for these values; bf16 truncation is applied to the reference too.
  ThreadPool pool(3);
  for (int64_t n_tokens : {int64_t{1}, int64_t{5}, kTokenBlock, kTokenBlock * 2 + 3}) {
    std::vector<float> x(static_cast<size_t>(n_tokens * cols));
    for (float& v : x) v = static_cast<float>(q(rng)) / 512.0f;
    struct Case {
      DType dtype;
      const void* data;
    };
    for (const Case& c : {Case{DType::f32, w.data()}, Case{DType::bf16, w_bf16.data()}, Case{DType::f16, w_f16.data()}}) {
      const WeightMatrix m{static_cast<const std::byte*>(c.data), c.dtype, rows, cols};
      std::vector<float> y(static_cast<size_t>(n_tokens * rows));
      matmul(m, x.data(), n_tokens, y.data(), pool);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const size_t wi = static_cast<size_t>(r * cols + k);
            const float wv = c.dtype == DType::bf16 ? bf16_to_float(w_bf16[wi]) : w[wi];
            ref += static_cast<double>(wv) * x[static_cast<size_t>(t * cols + k)];
          }
          EXPECT_NEAR(y[static_cast<size_t>(t * rows + r)], ref, 1e-4) << dtype_name(c.dtype) << " t" << t << " r" << r;
        }
      }
    }
  }
}

TEST(CpuOps, RmsNormFollowsHf) {
  const float x[4] = {1.0f, -2.0f, 3.0f, 0.5f};
  const float w[4] = {1.0f, 2.0f, 0.5f, -1.0f};
  float out[4];
  rms_norm(x, w, 4, 1e-5, out);
  const double inv = 1.0 / std::sqrt((1.0 + 4.0 + 9.0 + 0.25) / 4.0 + 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], w[i] * x[i] * inv, 1e-6);
}

TEST(CpuOps, Llama3RopeScalesLowFrequenciesAndInterpolatesTheMiddle) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  const auto plain = rope_inv_freq(c);
  c.rope_scaling.type = RopeScaling::Type::llama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  const auto scaled = rope_inv_freq(c);
  ASSERT_EQ(plain.size(), 64u);
  int high = 0, low = 0, mid = 0;
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_NEAR(plain[i], std::pow(500000.0, -static_cast<double>(2 * i) / 128.0), 1e-6 * plain[i]);
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4.0) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(scaled[i], plain[i] / 8.0f);
      ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_NEAR(scaled[i], (1 - smooth) * plain[i] / 8.0 + smooth * plain[i], 1e-6 * plain[i]);
      ++mid;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(CpuOps, RopeRotatesPairsJAndJPlusHalf) {
  const std::vector<float> inv = {1.0f, 0.5f};
  float cs[2], sn[2];
  rope_cos_sin(inv, 3, cs, sn);
  EXPECT_FLOAT_EQ(cs[1], std::cos(1.5f));
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  rope_apply(x, cs, sn, 2);
  EXPECT_NEAR(x[0], 1.0 * std::cos(3.0) - 3.0 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[2], 3.0 * std::cos(3.0) + 1.0 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[1], 2.0 * std::cos(1.5) - 4.0 * std::sin(1.5), 1e-6);
  EXPECT_NEAR(x[3], 4.0 * std::cos(1.5) + 2.0 * std::sin(1.5), 1e-6);
}

}  // namespace
}  // namespace kernelllm::cpu
