// band_gemm_swiglu_dynamic (engine/cuda/band_dynamic.cuh) against the float64 silu(gate) * up on
// the rounded inputs: every unit size (1, 2, 4 pairs), chunk count (1, 2, 3, 8: capped at one
// chunk per stage) and stage width (1, 4, 8 segments of 64 columns; a last stage past the columns
// at 1,088 and 192), grids of one block (every unit taken from the counter), a few blocks and one
// per SM, 1, 20 and 32 tokens, gate rows not a multiple of 16 (37: the up rows start mid-tile)
// and pair groups past the matrix; then the 8B gate_up. The activation depends
// on the pairs and chunks only, never on the grid or on timing (compared bit for bit), and every
// call leaves the scratch's counters at zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "engine/cuda/band_dynamic.cuh"
#include "engine/cuda/init.cuh"

namespace kernelllm {
namespace {

using namespace cuda_test;

constexpr int64_t kMaxTokens = 32;

struct Glu {
  DType type = DType::bf16;
  int64_t inter = 0, cols = 0;
  std::vector<float> w, x;  // rounded: W [2 inter, cols], x [kMaxTokens, cols]
  cuda::DeviceBuffer d_w, d_x;
  std::vector<int64_t> rows;  // gate rows checked
};

Glu make_glu(DType t, int64_t inter, int64_t cols, uint32_t seed) {
  Glu g;
  g.type = t;
  g.inter = inter;
  g.cols = cols;
  const int64_t n = 2 * inter * cols;
  if (n > 4'000'000) {  // device-made weights (std 0.02), as the 8B checks elsewhere
    EXPECT_TRUE(g.d_w.allocate(static_cast<size_t>(n) * dtype_size(t), "w").ok());
    cuda::fill_random(t, g.d_w.get(), n, seed, 0.02f, nullptr);
    g.w = download(g.d_w, static_cast<size_t>(n), t);
  } else {
    g.w = random_vector(static_cast<size_t>(n), seed, 0.05f);
    const auto wb = encode(g.w, t);
    g.d_w = upload(wb.data(), wb.size());
  }
  g.x = random_vector(static_cast<size_t>(kMaxTokens * cols), seed + 1);
  const auto xb = encode(g.x, t);
  g.d_x = upload(xb.data(), xb.size());
  const int64_t stride = inter > 2000 ? 13 : 1;
  for (int64_t r = 0; r < inter; ++r) {
    if (r < 64 || r >= inter - 64 || r % stride == 0) g.rows.push_back(r);
  }
  return g;
}

// The scratch for a config, its counters zeroed.
struct Scratch {
  cuda::DeviceBuffer counters, partials;
  cuda::BandDynamicScratch s;
};

Scratch make_scratch(const cuda::BandDynamicConfig& c, int64_t inter) {
  Scratch sc;
  const int64_t nc = cuda::band_dynamic_counters(c, inter), np = cuda::band_dynamic_partials(c, inter);
  EXPECT_TRUE(sc.counters.allocate(static_cast<size_t>(nc) * 4, "counters").ok());
  EXPECT_EQ(cudaMemset(sc.counters.get(), 0, static_cast<size_t>(nc) * 4), cudaSuccess);
  if (np > 0) {
    EXPECT_TRUE(sc.partials.allocate(static_cast<size_t>(np) * 4, "partials").ok());
  }
  sc.s = {sc.counters.as<int32_t>(), np > 0 ? sc.partials.as<float>() : nullptr, nc, np};
  return sc;
}

// The activation's raw bytes (n x inter in g.type) after one call.
// Whether two stages of the config fit the ring at n tokens (else the call is refused).
bool fits(const cuda::BandDynamicConfig& c, int64_t n) {
  const int64_t nt = (n + 7) / 8;                                  // 8-token tiles
  const int64_t slot = c.segments * (2 * c.pairs * 16 + nt * 8) * 64 * 2;  // weights and tokens, bf16/f16
  const int64_t sums = 8 * (2 * nt * 4) * 32 * 4;                  // the 8 warps' fp32 sums
  return 2 * slot <= 220 * 1024 - sums;
}

std::vector<std::byte> run(const Glu& g, const cuda::BandDynamicConfig& c, const Scratch& sc, int64_t n) {
  const size_t bytes = static_cast<size_t>(n * g.inter) * dtype_size(g.type);
  cuda::DeviceBuffer d_y = poisoned(bytes);
  const Status s = cuda::band_gemm_swiglu_dynamic(c, g.type, g.d_w.get(), g.inter, g.cols, g.d_x.get(), n, d_y.get(),
                                                  sc.s, cuda::current_sm_count(), nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> out(bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), d_y.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

float value(const Glu& g, const std::vector<std::byte>& y, size_t i) {
  uint16_t bits = 0;
  std::memcpy(&bits, y.data() + 2 * i, 2);
  return g.type == DType::bf16 ? cpu::bf16_to_float(bits) : cpu::f16_to_float(bits);
}

// Normalized error against float64 over the checked rows; infinity where any output is not finite.
double glu_error(const Glu& g, const std::vector<std::byte>& y, int64_t n) {
  for (size_t i = 0; i < static_cast<size_t>(n * g.inter); ++i) {
    if (!std::isfinite(value(g, y, i))) return INFINITY;
  }
  double num = 0, den = 0;
  for (int64_t r : g.rows) {
    const float* wg = g.w.data() + r * g.cols;
    const float* wu = g.w.data() + (g.inter + r) * g.cols;
    for (int64_t k = 0; k < n; ++k) {
      const float* xr = g.x.data() + k * g.cols;
      double a = 0, b = 0;
      for (int64_t c = 0; c < g.cols; ++c) {
        a += static_cast<double>(wg[c]) * xr[c];
        b += static_cast<double>(wu[c]) * xr[c];
      }
      const double ref = a / (1.0 + std::exp(-a)) * b;
      const double d = value(g, y, static_cast<size_t>(k * g.inter + r)) - ref;
      num += d * d;
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

double tolerance(DType t) { return t == DType::bf16 ? 8e-3 : 1e-3; }  // the output's rounding

bool counters_zero(const Scratch& sc) {
  std::vector<int32_t> v(static_cast<size_t>(sc.s.counter_count), -1);
  EXPECT_EQ(cudaMemcpy(v.data(), sc.counters.get(), v.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int32_t c : v) {
    if (c != 0) return false;
  }
  return true;
}

std::string name(const cuda::BandDynamicConfig& c) {
  return "pairs " + std::to_string(c.pairs) + " chunks " + std::to_string(c.chunks) + " segments " +
         std::to_string(c.segments) + " blocks " + std::to_string(c.blocks);
}

class BandDynamicTest : public ::testing::TestWithParam<DType> {};

TEST_P(BandDynamicTest, SmallShapesEveryUnitAndGrid) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64}, {37, 1088}, {300, 2048}, {4500, 192}};
  uint32_t seed = 2100;
  for (auto [inter, cols] : shapes) {
    const Glu g = make_glu(t, inter, cols, seed += 2);
    for (int pairs : {1, 2, 4}) {
      for (int chunks : {1, 2, 3, 8}) {
        for (int segments : {1, 4, 8}) {
          for (int64_t n : {1, 20, 32}) {
            std::vector<std::byte> first;
            for (int blocks : {1, 5, 0}) {
              const cuda::BandDynamicConfig c{pairs, chunks, segments, blocks};
              const Scratch sc = make_scratch(c, inter);
              if (!fits(c, n)) {
                EXPECT_EQ(cuda::band_gemm_swiglu_dynamic(c, t, g.d_w.get(), inter, cols, g.d_x.get(), n, nullptr, sc.s,
                                                         cuda::current_sm_count(), nullptr)
                              .code(),
                          ErrorCode::invalid_argument)
                    << name(c) << " n " << n << ": two stages do not fit, yet the call was taken";
                continue;
              }
              const auto y = run(g, c, sc, n);
              const auto again = run(g, c, sc, n);  // the counters as the first call left them
              EXPECT_LT(glu_error(g, y, n), tolerance(t))
                  << "inter " << inter << " cols " << cols << " " << name(c) << " n " << n;
              EXPECT_EQ(y, again) << "inter " << inter << " " << name(c) << " n " << n << ": a second call differs";
              EXPECT_TRUE(counters_zero(sc)) << "inter " << inter << " " << name(c) << " n " << n;
              if (first.empty()) {
                first = y;
              } else {
                EXPECT_EQ(y, first) << "inter " << inter << " " << name(c) << " n " << n << ": differs by grid";
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(BandDynamicTest, Llama8BGateUp) {
  const DType t = GetParam();
  const Glu g = make_glu(t, 14336, 4096, 2300);
  for (int pairs : {1, 2}) {
    for (int chunks : {1, 2, 4}) {
      const cuda::BandDynamicConfig c{pairs, chunks, 4, 0};
      const Scratch sc = make_scratch(c, g.inter);
      for (int64_t n : {17, 20, 32}) {
        const auto y = run(g, c, sc, n);
        const double e = glu_error(g, y, n);
        std::printf("[band dynamic 14336 x 4096 %s n=%lld] rel err %.3g\n", name(c).c_str(),
                    static_cast<long long>(n), e);
        EXPECT_LT(e, tolerance(t)) << name(c) << " n " << n;
        EXPECT_EQ(run(g, c, sc, n), y) << name(c) << " n " << n << ": a second call differs";
        EXPECT_TRUE(counters_zero(sc)) << name(c) << " n " << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BandDynamicTest, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(BandDynamicLayout, InvalidConfigsShapesAndScratchRefused) {
  int32_t counter = 0;
  float partial = 0.0f;
  const cuda::BandDynamicScratch some{&counter, &partial, 1 << 20, 1 << 30};
  const auto code = [&](cuda::BandDynamicConfig c, DType t, int64_t inter, int64_t cols, int64_t n,
                        const cuda::BandDynamicScratch& s, int sms = 132) {
    return cuda::band_gemm_swiglu_dynamic(c, t, nullptr, inter, cols, nullptr, n, nullptr, s, sms, nullptr).code();
  };
  const auto bad = ErrorCode::invalid_argument;
  EXPECT_EQ(code({3, 1}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({0, 1}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 0}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 9}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1, 0}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1, 9}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1, 4, -1}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1, 4, 0, 16}, DType::bf16, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1}, DType::bf16, 0, 1000, 20, some), bad);  // not whole segments
  EXPECT_EQ(code({1, 1}, DType::bf16, 0, 64, 20, some, 0), bad);
  EXPECT_EQ(code({1, 1}, DType::f32, 0, 64, 20, some), bad);
  EXPECT_EQ(code({1, 1}, DType::bf16, 0, 12, 20, some), bad);
  EXPECT_EQ(code({1, 1}, DType::bf16, 0, 64, 0, some), bad);
  EXPECT_EQ(code({1, 1}, DType::bf16, 0, 64, 33, some), bad);
  EXPECT_EQ(code({1, 1}, DType::bf16, -1, 64, 20, some), bad);
  // Rows to compute and too little scratch (checked before anything is launched).
  const cuda::BandDynamicScratch few{&counter, &partial, 2, 0};
  EXPECT_EQ(code({1, 1}, DType::bf16, 16, 64, 20, few), bad);
  const cuda::BandDynamicScratch no_partials{&counter, nullptr, 1 << 20, 0};
  EXPECT_EQ(code({1, 2}, DType::bf16, 16, 64, 20, no_partials), bad);
  EXPECT_EQ(cuda::band_dynamic_counters({1, 1}, 14336), 2 + 896);
  EXPECT_EQ(cuda::band_dynamic_counters({2, 1}, 37), 2 + 2);
  EXPECT_EQ(cuda::band_dynamic_partials({1, 1}, 14336), 0);
  EXPECT_EQ(cuda::band_dynamic_partials({2, 4}, 14336), 448 * 4 * 2 * 1024);
  // No rows: nothing launched, no scratch needed.
  EXPECT_EQ(code({4, 8, 8}, DType::f16, 0, 64, 32, {}), ErrorCode::ok);
}

}  // namespace
}  // namespace kernelllm
