// The decode projection kernels against a float64 CPU reference on the rounded inputs.
// The GEMV (engine/cuda/gemv.cuh): every layout the split-row kernel accepts (warps per row x rows
// per group), the layout gemv() picks and the old warp-per-row kernel, for f32/f16/bf16, 1..8
// tokens, odd row counts and column counts that do not divide into a block's split; then the
// Llama-3.1-8B shapes; its fused SwiGLU form (gemv_swiglu) against the two kernels it replaces.
// The skinny tensor-core GEMM (engine/cuda/skinny_gemm.cuh): every layout, f16/bf16, 1..32
// tokens (every count of 8-token tiles, full and partial), the three outputs (fp32, fp32
// accumulated, the weights' dtype) and the 8B shapes. The staged GEMM
// (engine/cuda/staged_gemm.cuh) alike, at both stage widths and at grids from one block to more
// blocks than units, so bands are shared by up to dozens of blocks. The band GEMM
// (engine/cuda/band_gemm.cuh) at every cluster size and grids from one block (several waves) to
// one per SM, and its SwiGLU form. Tolerance 3e-5 normalized for
// fp32 outputs: fp32 accumulation over up to 14,336 columns (as in cuda_ops_test Projections).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/init.cuh"
#include "engine/cuda/skinny_gemm.cuh"
#include "engine/cuda/staged_gemm.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm {
namespace {

using namespace cuda_test;

constexpr double kTolerance = 3e-5;

// One weight matrix and `tokens` activation rows, rounded to the dtype, on host and device; the
// float64 products of the checked rows for all the tokens.
struct Problem {
  DType type = DType::f32;
  int64_t rows = 0, cols = 0, tokens = cuda::kGemvMaxTokens;
  std::vector<float> w, x;
  cuda::DeviceBuffer d_w, d_x;
  std::vector<int64_t> checked;  // rows compared with the reference
  std::vector<double> ref;       // ref[t * checked.size() + i] = W[checked[i]] . x[t]
};

void finish(Problem& p) {
  const size_t m = p.checked.size();
  p.ref.assign(static_cast<size_t>(p.tokens) * m, 0.0);
  for (size_t i = 0; i < m; ++i) {
    const float* wr = p.w.data() + p.checked[i] * p.cols;
    for (int64_t t = 0; t < p.tokens; ++t) {
      const float* xr = p.x.data() + t * p.cols;
      double s = 0;
      for (int64_t c = 0; c < p.cols; ++c) s += static_cast<double>(wr[c]) * xr[c];
      p.ref[static_cast<size_t>(t) * m + i] = s;
    }
  }
}

void set_x(Problem& p, uint32_t seed) {
  p.x = random_vector(static_cast<size_t>(p.tokens * p.cols), seed);
  const auto xb = encode(p.x, p.type);
  p.d_x = upload(xb.data(), xb.size());
}

// Host-made weights; every row checked.
Problem small_problem(DType t, int64_t rows, int64_t cols, uint32_t seed, int64_t tokens = cuda::kGemvMaxTokens) {
  Problem p;
  p.type = t;
  p.rows = rows;
  p.cols = cols;
  p.tokens = tokens;
  p.w = random_vector(static_cast<size_t>(rows * cols), seed, 0.05f);
  const auto wb = encode(p.w, t);
  p.d_w = upload(wb.data(), wb.size());
  set_x(p, seed + 1);
  for (int64_t r = 0; r < rows; ++r) p.checked.push_back(r);
  finish(p);
  return p;
}

// Device-made weights (fill_random, std 0.02); checked: the first and last 300 rows (first and
// last blocks of every layout) and about 4,096 rows spread over the rest.
Problem large_problem(DType t, int64_t rows, int64_t cols, uint32_t seed, int64_t tokens = cuda::kGemvMaxTokens) {
  Problem p;
  p.type = t;
  p.rows = rows;
  p.cols = cols;
  p.tokens = tokens;
  const int64_t n = rows * cols;
  EXPECT_TRUE(p.d_w.allocate(static_cast<size_t>(n) * dtype_size(t), "w").ok());
  cuda::fill_random(t, p.d_w.get(), n, seed, 0.02f, nullptr);
  p.w = download(p.d_w, static_cast<size_t>(n), t);
  set_x(p, seed + 1);
  const int64_t stride = std::max<int64_t>(1, rows / 4096);
  for (int64_t r = 0; r < rows; ++r) {
    if (r < 300 || r >= rows - 300 || r % stride == stride / 2) p.checked.push_back(r);
  }
  finish(p);
  return p;
}

// Normalized error of y[n_tokens, rows] (in y_type) over the checked rows, against the products
// plus `base` (the output's earlier values, when the kernel accumulated); infinity when any output
// (checked or not) is not finite, so rows left unwritten in the poisoned buffer fail.
double error_of(const Problem& p, const cuda::DeviceBuffer& d_y, int64_t n_tokens, DType y_type = DType::f32,
                const std::vector<float>* base = nullptr) {
  const auto y = download(d_y, static_cast<size_t>(n_tokens * p.rows), y_type);
  for (float v : y) {
    if (!std::isfinite(v)) return INFINITY;
  }
  const size_t m = p.checked.size();
  double num = 0, den = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (size_t i = 0; i < m; ++i) {
      const size_t at = static_cast<size_t>(t * p.rows + p.checked[i]);
      const double ref = p.ref[static_cast<size_t>(t) * m + i] + (base != nullptr ? (*base)[at] : 0.0);
      const double d = static_cast<double>(y[at]) - ref;
      num += d * d;
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

enum class Kernel { chosen, warp_per_row };

double run(const Problem& p, Kernel k, int64_t n_tokens) {
  auto d_y = poisoned(static_cast<size_t>(n_tokens * p.rows) * 4);
  if (k == Kernel::chosen) {
    cuda::gemv(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n_tokens, d_y.as<float>(), nullptr);
  } else {
    cuda::gemv_warp_per_row(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n_tokens, d_y.as<float>(), nullptr);
  }
  return error_of(p, d_y, n_tokens);
}

double run_layout(const Problem& p, const cuda::GemvConfig& c, int64_t n_tokens) {
  auto d_y = poisoned(static_cast<size_t>(n_tokens * p.rows) * 4);
  const Status s = cuda::gemv_with_config(c, p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n_tokens,
                                          d_y.as<float>(), nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return error_of(p, d_y, n_tokens);
}

std::string shape_name(const Problem& p) {
  return std::string(dtype_name(p.type)) + " " + std::to_string(p.rows) + "x" + std::to_string(p.cols);
}

class GemvTest : public ::testing::TestWithParam<DType> {};

// Small shapes, every layout and token count (so every kernel instantiation runs): one 16-byte
// chunk per row; rows fewer than one block's rows; 131 rows (no layout divides it); chunk counts
// just past a power of two (513 for 16-bit types at 4,104 columns), so the last batch of every
// layout is partial.
TEST_P(GemvTest, EveryLayoutSmallShapes) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {131, 1000}, {7, 4104}, {300, 2056}, {64, 64}, {1, 4096}};
  uint32_t seed = 100;
  for (auto [rows, cols] : shapes) {
    ASSERT_TRUE(cuda::gemv_supported(t, cols, 1));
    const Problem p = small_problem(t, rows, cols, seed += 2);
    for (int wpr : {1, 2, 4, 8}) {
      for (int rpg : {1, 2, 4}) {
        for (int64_t n = 1; n <= p.tokens; ++n) {
          const double e = run_layout(p, cuda::GemvConfig{wpr, rpg}, n);
          EXPECT_LT(e, kTolerance) << shape_name(p) << " warps_per_row " << wpr << " rows_per_group " << rpg
                                   << " n " << n;
        }
      }
    }
    for (int64_t n = 1; n <= p.tokens; ++n) {
      const double e = run(p, Kernel::chosen, n);
      EXPECT_LT(e, kTolerance) << shape_name(p) << " gemv n " << n;
      const double e_old = run(p, Kernel::warp_per_row, n);
      EXPECT_LT(e_old, kTolerance) << shape_name(p) << " warp-per-row n " << n;
    }
  }
}

// The decode projections of Llama-3.1-8B (hidden 4,096, 32 + 2 x 8 heads of 128, intermediate
// 14,336, vocabulary 128,256).
struct Shape {
  const char* name;
  int64_t rows, cols;
};
constexpr Shape kLlama8BShapes[] = {{"qkv", 6144, 4096},
                                    {"o", 4096, 4096},
                                    {"gate_up", 28672, 4096},
                                    {"down", 4096, 14336},
                                    {"lm_head", 128256, 4096}};

// The 8B shapes with the layout gemv() picks and with the old kernel.
TEST_P(GemvTest, Llama8BShapes) {
  const DType t = GetParam();
  uint32_t seed = 7;
  for (const Shape& s : kLlama8BShapes) {
    const Problem p = large_problem(t, s.rows, s.cols, seed += 2);
    const cuda::GemvConfig c = cuda::gemv_config(t, s.rows, s.cols);
    for (int64_t n : {1, 2, 8}) {
      const double e = run(p, Kernel::chosen, n);
      const double e_old = run(p, Kernel::warp_per_row, n);
      std::printf("[gemv %s %s n=%lld] layout %d warps/row x %d rows/group: rel err %.3g (warp-per-row %.3g)\n",
                  s.name, shape_name(p).c_str(), static_cast<long long>(n), c.warps_per_row, c.rows_per_group, e,
                  e_old);
      EXPECT_LT(e, kTolerance) << s.name << " " << shape_name(p) << " n " << n;
      EXPECT_LT(e_old, kTolerance) << s.name << " " << shape_name(p) << " warp-per-row n " << n;
    }
  }
}

// Normalized error of the activation act[n, inter] (in p.type; p's W is [Wg; Wu], 2 x inter rows)
// against the float64 silu(gate) * up, over the checked gate rows whose up rows are checked too.
double swiglu_error(const Problem& p, int64_t inter, const cuda::DeviceBuffer& d_act, int64_t n) {
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t a = 0; a < p.checked.size() && p.checked[a] < inter; ++a) {
    const auto up = std::find(p.checked.begin(), p.checked.end(), inter + p.checked[a]);
    if (up != p.checked.end()) pairs.emplace_back(a, static_cast<size_t>(up - p.checked.begin()));
  }
  EXPECT_FALSE(pairs.empty());
  const std::vector<float> act = download(d_act, static_cast<size_t>(n * inter), p.type);
  for (float v : act) {
    if (!std::isfinite(v)) return INFINITY;  // unwritten (poisoned)
  }
  double num = 0, den = 0;
  const size_t m = p.checked.size();
  for (int64_t k = 0; k < n; ++k) {
    for (auto [gi, ui] : pairs) {
      const double g = p.ref[static_cast<size_t>(k) * m + gi], u = p.ref[static_cast<size_t>(k) * m + ui];
      const double ref = g / (1.0 + std::exp(-g)) * u;
      const double d = act[static_cast<size_t>(k * inter + p.checked[gi])] - ref;
      num += d * d;
      den += ref * ref;
    }
  }
  return std::sqrt(num / den);
}

double swiglu_tolerance(DType t) { return t == DType::bf16 ? 8e-3 : t == DType::f16 ? 1e-3 : kTolerance; }

// gemv_swiglu: the activation the two-kernel path (gemv, then swiglu.cuh's kernel on its fp32
// sums) writes, byte for byte, and near the float64 silu(gate) * up. Shapes whose layouts take 2
// and 4 rows per group (and 1, raised to 2), odd pair counts, 1..8 tokens, the 8B gate_up.
TEST_P(GemvTest, FusedSwigluMatchesTwoKernels) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {37, 1000}, {300, 4104}, {20, 14336}, {14336, 4096}};
  uint32_t seed = 300;
  for (auto [inter, cols] : shapes) {
    const Problem p = inter * cols > 1'000'000 ? large_problem(t, 2 * inter, cols, seed += 2)
                                               : small_problem(t, 2 * inter, cols, seed += 2);
    for (int64_t n = 1; n <= p.tokens; ++n) {
      const size_t count = static_cast<size_t>(n * inter);
      auto d_sums = poisoned(static_cast<size_t>(n * 2 * inter) * 4);
      auto d_two = poisoned(count * dtype_size(t));
      auto d_fused = poisoned(count * dtype_size(t));
      cuda::gemv(t, p.d_w.get(), 2 * inter, cols, p.d_x.get(), n, d_sums.as<float>(), nullptr);
      cuda::swiglu(t, DType::f32, d_sums.get(), n, inter, d_two.get(), nullptr);
      cuda::gemv_swiglu(t, p.d_w.get(), inter, cols, p.d_x.get(), n, d_fused.get(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> two(count * dtype_size(t)), fused(two.size());
      ASSERT_EQ(cudaMemcpy(two.data(), d_two.get(), two.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(fused.data(), d_fused.get(), fused.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(fused, two) << dtype_name(t) << " inter " << inter << " cols " << cols << " n " << n;
      EXPECT_LT(swiglu_error(p, inter, d_fused, n), swiglu_tolerance(t))
          << dtype_name(t) << " inter " << inter << " cols " << cols << " n " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvTest, ::testing::Values(DType::bf16, DType::f16, DType::f32),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(GemvLayout, InvalidLayoutsAndShapesRefused) {
  const auto refused = [](cuda::GemvConfig c, int64_t cols, int64_t n) {
    const Status s = cuda::gemv_with_config(c, DType::bf16, nullptr, 16, cols, nullptr, n, nullptr, nullptr);
    return s.code() == ErrorCode::invalid_argument;
  };
  EXPECT_TRUE(refused({3, 1}, 64, 1));
  EXPECT_TRUE(refused({16, 1}, 64, 1));
  EXPECT_TRUE(refused({8, 8}, 64, 1));
  EXPECT_TRUE(refused({8, 3}, 64, 1));
  EXPECT_TRUE(refused({8, 4}, 12, 1));
  EXPECT_TRUE(refused({8, 4}, 64, 0));
  EXPECT_TRUE(refused({8, 4}, 64, 9));
}

// The layouts gemv() picks are ones gemv_with_config accepts, for every supported column count up
// to 16,384 and row counts from 1 to 128,256 (no launch: rows = 0 runs nothing).
TEST(GemvLayout, ChosenLayoutsAreValid) {
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    for (int64_t rows : {1, 7, 131, 4096, 128256}) {
      for (int64_t cols = 8; cols <= 16384; cols += 8) {
        const cuda::GemvConfig c = cuda::gemv_config(t, rows, cols);
        const Status s = cuda::gemv_with_config(c, t, nullptr, 0, cols, nullptr, 1, nullptr, nullptr);
        ASSERT_TRUE(s.ok()) << s.to_string() << " rows " << rows << " cols " << cols;
      }
    }
  }
}

// --- the skinny tensor-core GEMM ------------------------------------------------------------------

constexpr int64_t kSkinnyTokens = cuda::kSkinnyMaxTokens;
// Token counts covering one to four 8-token tiles, full and partial.
constexpr int64_t kSkinnyCounts[] = {1, 2, 7, 8, 9, 16, 17, 20, 24, 25, 31, 32};

// The output in y_type (fresh), or fp32 accumulated onto seeded values; the normalized error.
double run_skinny(const Problem& p, const cuda::SkinnyConfig* c, int64_t n, DType y_type, bool accumulate) {
  const size_t count = static_cast<size_t>(n * p.rows);
  const std::vector<float> base =
      accumulate ? random_vector(count, static_cast<uint32_t>(n + p.rows), 0.5f) : std::vector<float>{};
  cuda::DeviceBuffer d_y = accumulate ? upload(base) : poisoned(count * dtype_size(y_type));
  if (c != nullptr) {
    const Status s = cuda::skinny_gemm_with_config(*c, p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n,
                                                   d_y.get(), y_type, accumulate, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
  } else {
    cuda::skinny_gemm(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.get(), y_type, accumulate, nullptr);
  }
  return error_of(p, d_y, n, y_type, accumulate ? &base : nullptr);
}

// Rounding the output to bf16 (8 significant bits) or f16 (11) adds about 2^-9 / 2^-12 / sqrt(3)
// of normalized error on top of the fp32 sum's.
double output_tolerance(DType y_type) {
  return y_type == DType::bf16 ? 2.5e-3 : y_type == DType::f16 ? 3e-4 : kTolerance;
}

// Every layout skinny_gemm_with_config accepts.
std::vector<cuda::SkinnyConfig> every_skinny_layout() {
  std::vector<cuda::SkinnyConfig> all;
  for (int tiles : {1, 2, 4}) {
    for (int kw : {1, 2, 4, 8}) {
      for (bool dealt : {true, false}) {
        if (tiles * kw <= 16) all.push_back({tiles, kw, dealt});
      }
    }
  }
  return all;
}

std::string layout_name(const cuda::SkinnyConfig& c) {
  return std::to_string(c.tiles_per_warp) + " tiles/warp x " + std::to_string(c.k_warps) + " k-warps" +
         (c.dealt ? " (dealt)" : " (spans)");
}

class SkinnyTest : public ::testing::TestWithParam<DType> {};

// Small shapes, every layout and token count (every kernel instantiation with fp32 output):
// one 32-column chunk or less (8 and 40 columns: the last chunk partial); rows fewer than one
// tile; 131 rows (no tile count divides it); column counts whose chunks do not split evenly over
// the block's warps.
TEST_P(SkinnyTest, EveryLayoutSmallShapes) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {200, 40}, {131, 1000}, {7, 4104}, {300, 2056}, {64, 64}};
  uint32_t seed = 300;
  for (auto [rows, cols] : shapes) {
    ASSERT_TRUE(cuda::skinny_supported(t, cols, kSkinnyTokens));
    const Problem p = small_problem(t, rows, cols, seed += 2, kSkinnyTokens);
    for (const cuda::SkinnyConfig& c : every_skinny_layout()) {
      for (int64_t n : kSkinnyCounts) {
        const double e = run_skinny(p, &c, n, DType::f32, false);
        EXPECT_LT(e, kTolerance) << shape_name(p) << " layout " << layout_name(c) << " n " << n;
      }
    }
  }
}

// The outputs the backend asks for: fp32 accumulated in place (o and down onto the residual
// stream) and the weights' dtype (qkv and gate_up): every kernel instantiation of those outputs
// runs (each tile count, every count of token tiles).
TEST_P(SkinnyTest, AccumulatedAndNarrowOutputs) {
  const DType t = GetParam();
  uint32_t seed = 500;
  for (int64_t rows : {48, 300, 9000}) {
    const Problem p = small_problem(t, rows, 520, seed += 2, kSkinnyTokens);
    for (const cuda::SkinnyConfig& c :
         {cuda::SkinnyConfig{1, 8, true}, cuda::SkinnyConfig{2, 2, false}, cuda::SkinnyConfig{4, 4, true}}) {
      for (int64_t n : kSkinnyCounts) {
        const double acc = run_skinny(p, &c, n, DType::f32, true);
        EXPECT_LT(acc, kTolerance) << shape_name(p) << " accumulated, layout " << layout_name(c) << " n " << n;
        const double narrow = run_skinny(p, &c, n, t, false);
        EXPECT_LT(narrow, output_tolerance(t)) << shape_name(p) << " in " << dtype_name(t) << ", layout " << layout_name(c)
                                               << " n " << n;
      }
    }
  }
}

// The 8B shapes at the batch sizes of k-sample decoding, with the layout skinny_gemm() picks.
TEST_P(SkinnyTest, Llama8BShapes) {
  const DType t = GetParam();
  uint32_t seed = 70;
  for (const Shape& s : kLlama8BShapes) {
    const Problem p = large_problem(t, s.rows, s.cols, seed += 2, kSkinnyTokens);
    const cuda::SkinnyConfig c = cuda::skinny_config(s.cols);
    for (int64_t n : {2, 8, 10, 16, 20, 32}) {
      const double e = run_skinny(p, nullptr, n, DType::f32, false);
      std::printf("[skinny %s %s n=%lld] layout %s: rel err %.3g\n", s.name, shape_name(p).c_str(),
                  static_cast<long long>(n), layout_name(c).c_str(), e);
      EXPECT_LT(e, kTolerance) << s.name << " " << shape_name(p) << " n " << n;
    }
  }
}

// The weights' L2 evict-first policy (common.cuh's weights_evict_first, on in the backend) is a
// cache hint: the GEMV's and the skinny GEMM's outputs keep their bits with it.
TEST_P(SkinnyTest, EvictFirstHintKeepsBits) {
  const DType t = GetParam();
  const Problem p = large_problem(t, 4096, 4096, 91, kSkinnyTokens);
  const auto outputs = [&] {
    std::vector<std::vector<float>> all;
    for (int64_t n : {1, 2}) {
      auto d_y = poisoned(static_cast<size_t>(n * p.rows) * 4);
      cuda::gemv(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.as<float>(), nullptr);
      all.push_back(download(d_y, static_cast<size_t>(n * p.rows)));
    }
    for (int64_t n : {2, 16}) {
      auto d_y = poisoned(static_cast<size_t>(n * p.rows) * 4);
      cuda::skinny_gemm(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.get(), DType::f32, false, nullptr);
      all.push_back(download(d_y, static_cast<size_t>(n * p.rows)));
    }
    return all;
  };
  const bool was = cuda::weights_evict_first();
  cuda::set_weights_evict_first(false);
  const auto plain = outputs();
  cuda::set_weights_evict_first(true);
  const auto hinted = outputs();
  cuda::set_weights_evict_first(was);
  ASSERT_EQ(plain.size(), hinted.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i], hinted[i]) << "output " << i;
    for (float v : hinted[i]) ASSERT_TRUE(std::isfinite(v)) << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SkinnyTest, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(SkinnyLayout, InvalidLayoutsShapesAndOutputsRefused) {
  // rows = 0: an accepted call would launch nothing (the arguments are null).
  const auto code = [](cuda::SkinnyConfig c, DType t, int64_t cols, int64_t n, DType y_type, bool acc) {
    return cuda::skinny_gemm_with_config(c, t, nullptr, 0, cols, nullptr, n, nullptr, y_type, acc, nullptr).code();
  };
  const auto bad = ErrorCode::invalid_argument;
  const cuda::SkinnyConfig ok{1, 8};
  EXPECT_EQ(code({3, 1}, DType::bf16, 64, 2, DType::f32, false), bad);
  EXPECT_EQ(code({1, 16}, DType::bf16, 64, 2, DType::f32, false), bad);
  EXPECT_EQ(code({4, 8}, DType::bf16, 64, 2, DType::f32, false), bad);
  EXPECT_EQ(code({1, 3}, DType::bf16, 64, 2, DType::f32, false), bad);
  EXPECT_EQ(code(ok, DType::bf16, 12, 2, DType::f32, false), bad);
  EXPECT_EQ(code(ok, DType::bf16, 64, 0, DType::f32, false), bad);
  EXPECT_EQ(code(ok, DType::bf16, 64, 33, DType::f32, false), bad);
  EXPECT_EQ(code(ok, DType::f32, 64, 2, DType::f32, false), bad);
  EXPECT_EQ(code(ok, DType::bf16, 64, 2, DType::f16, false), bad);
  EXPECT_EQ(code(ok, DType::bf16, 64, 2, DType::bf16, true), bad);
  EXPECT_EQ(code(ok, DType::bf16, 64, 2, DType::f32, true), ErrorCode::ok);
  EXPECT_EQ(code(ok, DType::bf16, 64, 32, DType::bf16, false), ErrorCode::ok);
  EXPECT_FALSE(cuda::skinny_supported(DType::f32, 64, 2));
  EXPECT_FALSE(cuda::skinny_supported(DType::bf16, 0, 2));
}

// The layouts skinny_gemm() picks are ones skinny_gemm_with_config accepts (no launch: rows = 0).
TEST(SkinnyLayout, ChosenLayoutsAreValid) {
  for (int64_t cols = 8; cols <= 16384; cols += 8) {
    const cuda::SkinnyConfig c = cuda::skinny_config(cols);
    const Status s = cuda::skinny_gemm_with_config(c, DType::bf16, nullptr, 0, cols, nullptr, 20, nullptr,
                                                   DType::f32, false, nullptr);
    ASSERT_TRUE(s.ok()) << s.to_string() << " cols " << cols;
  }
}

// --- the staged tensor-core GEMM ------------------------------------------------------------------

// Scratch for grids of up to kStagedMaxBlocks blocks and matrices of up to 128,256 rows.
constexpr int64_t kStagedMaxBlocks = 1024;
struct StagedScratchBuffers {
  cuda::DeviceBuffer partials, counters;
  StagedScratchBuffers() {
    const auto floats = static_cast<size_t>(cuda::staged_partial_floats(kStagedMaxBlocks));
    const auto counts = static_cast<size_t>(cuda::staged_counter_count(128256));
    EXPECT_TRUE(partials.allocate(floats * 4, "partials").ok());
    EXPECT_TRUE(counters.allocate(counts * 4, "counters").ok());
    EXPECT_EQ(cudaMemset(counters.get(), 0, counts * 4), cudaSuccess);
  }
  cuda::StagedScratch with(int64_t blocks) const {
    return {partials.as<float>(), counters.as<int32_t>(), blocks};
  }
};

// The output in y_type (fresh), or fp32 accumulated onto seeded values; the normalized error.
// config null: staged_gemm() (its default layout).
double run_staged(const Problem& p, const StagedScratchBuffers& sb, const cuda::StagedConfig* c, int64_t blocks,
                  int64_t n, DType y_type, bool accumulate) {
  const size_t count = static_cast<size_t>(n * p.rows);
  const std::vector<float> base =
      accumulate ? random_vector(count, static_cast<uint32_t>(n + p.rows), 0.5f) : std::vector<float>{};
  cuda::DeviceBuffer d_y = accumulate ? upload(base) : poisoned(count * dtype_size(y_type));
  if (c != nullptr) {
    const Status s = cuda::staged_gemm_with_config(*c, p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.get(),
                                                   y_type, accumulate, sb.with(blocks), nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
  } else {
    EXPECT_TRUE(cuda::staged_gemm(p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.get(), y_type, accumulate,
                                  sb.with(blocks), nullptr));
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return error_of(p, d_y, n, y_type, accumulate ? &base : nullptr);
}

class StagedTest : public ::testing::TestWithParam<DType> {};

// Small shapes at both stage widths, every count of 8-token tiles and grids of 1 block (every band
// whole in one block), a few blocks (blocks spanning several bands, bands split in two or three)
// and many (a band split over dozens of blocks, or more blocks asked for than there are units):
// one chunk of columns (8), a stage's columns not filled (40, 1000, 2056), one row, 131 rows (the
// last band partial), 300 rows by 4,104 columns.
TEST_P(StagedTest, EveryLayoutSmallShapes) {
  const DType t = GetParam();
  const StagedScratchBuffers sb;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {200, 40}, {131, 1000}, {7, 4104}, {300, 2056}, {256, 4104}};
  uint32_t seed = 900;
  for (auto [rows, cols] : shapes) {
    ASSERT_TRUE(cuda::staged_supported(t, cols, kSkinnyTokens));
    const Problem p = small_problem(t, rows, cols, seed += 2, kSkinnyTokens);
    for (int stage_cols : {128, 256}) {
      const cuda::StagedConfig c{stage_cols};
      for (int64_t blocks : {1, 2, 3, 7, 40, 1024}) {
        for (int64_t n : {1, 8, 9, 17, 20, 32}) {
          const double e = run_staged(p, sb, &c, blocks, n, DType::f32, false);
          EXPECT_LT(e, kTolerance) << shape_name(p) << " stage cols " << stage_cols << " blocks " << blocks << " n " << n;
        }
      }
    }
  }
}

// The outputs the backend asks for (fp32 accumulated in place, the weights' dtype), every token
// tile count, both stage widths, bands split between blocks.
TEST_P(StagedTest, AccumulatedAndNarrowOutputs) {
  const DType t = GetParam();
  const StagedScratchBuffers sb;
  uint32_t seed = 1100;
  for (int64_t rows : {48, 300, 9000}) {
    const Problem p = small_problem(t, rows, 520, seed += 2, kSkinnyTokens);
    for (int stage_cols : {128, 256}) {
      const cuda::StagedConfig c{stage_cols};
      for (int64_t blocks : {5, 132}) {
        for (int64_t n : kSkinnyCounts) {
          const double acc = run_staged(p, sb, &c, blocks, n, DType::f32, true);
          EXPECT_LT(acc, kTolerance) << shape_name(p) << " accumulated, stage cols " << stage_cols << " blocks "
                                     << blocks << " n " << n;
          const double narrow = run_staged(p, sb, &c, blocks, n, t, false);
          EXPECT_LT(narrow, output_tolerance(t)) << shape_name(p) << " in " << dtype_name(t) << ", stage cols "
                                                 << stage_cols << " blocks " << blocks << " n " << n;
        }
      }
    }
  }
}

// The 8B shapes at the batch sizes of k-sample decoding, one block per SM, as the backend runs it;
// each twice, so a band counter left nonzero by the first call would leave bands of the second
// unwritten (poisoned, so infinite error).
TEST_P(StagedTest, Llama8BShapes) {
  const DType t = GetParam();
  const StagedScratchBuffers sb;
  const int sms = cuda::current_sm_count();
  uint32_t seed = 170;
  for (const Shape& s : kLlama8BShapes) {
    const Problem p = large_problem(t, s.rows, s.cols, seed += 2, kSkinnyTokens);
    for (int64_t n : {9, 10, 16, 20, 32}) {
      for (int rep = 0; rep < 2; ++rep) {
        const double e = run_staged(p, sb, nullptr, sms, n, DType::f32, false);
        if (rep == 0) {
          std::printf("[staged %s %s n=%lld] %d blocks: rel err %.3g\n", s.name, shape_name(p).c_str(),
                      static_cast<long long>(n), sms, e);
        }
        EXPECT_LT(e, kTolerance) << s.name << " " << shape_name(p) << " n " << n << " call " << rep;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, StagedTest, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(StagedLayout, InvalidLayoutsShapesOutputsAndScratchRefused) {
  // rows = 0: an accepted call would launch nothing (the arguments are null).
  const float dummy_partials = 0.0f;
  int32_t dummy_counter = 0;
  const cuda::StagedScratch none{};
  const cuda::StagedScratch some{const_cast<float*>(&dummy_partials), &dummy_counter, 1};
  const auto code = [&](cuda::StagedConfig c, DType t, int64_t rows, int64_t cols, int64_t n, DType y_type, bool acc,
                        const cuda::StagedScratch& s) {
    return cuda::staged_gemm_with_config(c, t, nullptr, rows, cols, nullptr, n, nullptr, y_type, acc, s, nullptr)
        .code();
  };
  const auto bad = ErrorCode::invalid_argument;
  const cuda::StagedConfig ok{128};
  EXPECT_EQ(code({64}, DType::bf16, 0, 64, 20, DType::f32, false, some), bad);
  EXPECT_EQ(code({512}, DType::bf16, 0, 64, 20, DType::f32, false, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 12, 20, DType::f32, false, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 64, 0, DType::f32, false, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 64, 33, DType::f32, false, some), bad);
  EXPECT_EQ(code(ok, DType::f32, 0, 64, 20, DType::f32, false, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 64, 20, DType::f16, false, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 64, 20, DType::bf16, true, some), bad);
  EXPECT_EQ(code(ok, DType::bf16, -1, 64, 20, DType::f32, false, some), bad);
  // Rows to compute and no scratch (checked before anything is launched).
  EXPECT_EQ(code(ok, DType::bf16, 16, 64, 20, DType::f32, false, none), bad);
  EXPECT_EQ(code(ok, DType::bf16, 0, 64, 20, DType::f32, true, none), ErrorCode::ok);
  EXPECT_EQ(code({256}, DType::f16, 0, 64, 32, DType::f16, false, none), ErrorCode::ok);
  EXPECT_FALSE(cuda::staged_supported(DType::f32, 64, 20));
  EXPECT_FALSE(cuda::staged_supported(DType::bf16, 0, 20));
}

// --- the band tensor-core GEMM --------------------------------------------------------------------

// The output in y_type (fresh), or fp32 accumulated onto seeded values; the normalized error.
double run_band(const Problem& p, const cuda::BandConfig& c, int64_t n, DType y_type, bool accumulate) {
  const size_t count = static_cast<size_t>(n * p.rows);
  const std::vector<float> base =
      accumulate ? random_vector(count, static_cast<uint32_t>(n + p.rows), 0.5f) : std::vector<float>{};
  cuda::DeviceBuffer d_y = accumulate ? upload(base) : poisoned(count * dtype_size(y_type));
  const Status s = cuda::band_gemm(c, p.type, p.d_w.get(), p.rows, p.cols, p.d_x.get(), n, d_y.get(), y_type,
                                   accumulate, cuda::current_sm_count(), nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return error_of(p, d_y, n, y_type, accumulate ? &base : nullptr);
}

std::string band_name(const cuda::BandConfig& c) {
  return "cluster " + std::to_string(c.cluster) + " blocks " + std::to_string(c.blocks) + " ring " +
         std::to_string(c.ring_kb) + " KB";
}

class BandTest : public ::testing::TestWithParam<DType> {};

// Small shapes at every cluster size and grids of 1 block (one tile per cluster up to 16: several
// waves), a few blocks and one per SM: one chunk of columns (8, fewer stages than blocks in a
// cluster), a stage not filled (40, 1000, 2056), one row, 131 rows (the last tile partial), 9,000
// rows (563 tiles: 16 to a cluster), every count of 8-token tiles.
TEST_P(BandTest, EveryLayoutSmallShapes) {
  const DType t = GetParam();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8},     {200, 40},  {131, 1000}, {7, 4104},
                                                {300, 2056}, {256, 4104}, {9000, 136}};
  uint32_t seed = 1300;
  for (auto [rows, cols] : shapes) {
    ASSERT_TRUE(cuda::band_supported(t, cols, kSkinnyTokens));
    const Problem p = small_problem(t, rows, cols, seed += 2, kSkinnyTokens);
    for (int cluster : {1, 2, 4}) {
      for (int blocks : {1, 8, 0}) {
        const cuda::BandConfig c{cluster, blocks};
        for (int64_t n : {1, 8, 9, 17, 20, 32}) {
          const double e = run_band(p, c, n, DType::f32, false);
          EXPECT_LT(e, kTolerance) << shape_name(p) << " " << band_name(c) << " n " << n;
        }
      }
    }
  }
}

// The outputs the backend asks for (fp32 accumulated in place, the weights' dtype), every token
// tile count, the chosen cluster size and each fixed one.
TEST_P(BandTest, AccumulatedAndNarrowOutputs) {
  const DType t = GetParam();
  uint32_t seed = 1500;
  for (int64_t rows : {48, 300, 9000}) {
    const Problem p = small_problem(t, rows, 520, seed += 2, kSkinnyTokens);
    for (int cluster : {0, 1, 2, 4}) {
      const cuda::BandConfig c{cluster, 0, cluster == 1 ? 32 : 0};  // 32 KB: the ring's two stages at least
      for (int64_t n : kSkinnyCounts) {
        const double acc = run_band(p, c, n, DType::f32, true);
        EXPECT_LT(acc, kTolerance) << shape_name(p) << " accumulated, " << band_name(c) << " n " << n;
        const double narrow = run_band(p, c, n, t, false);
        EXPECT_LT(narrow, output_tolerance(t)) << shape_name(p) << " in " << dtype_name(t) << ", " << band_name(c)
                                               << " n " << n;
      }
    }
  }
}

// The 8B shapes at the batch sizes of k-sample decoding, in the layout the backend runs (printed).
TEST_P(BandTest, Llama8BShapes) {
  const DType t = GetParam();
  const int sms = cuda::current_sm_count();
  uint32_t seed = 190;
  for (const Shape& s : kLlama8BShapes) {
    const Problem p = large_problem(t, s.rows, s.cols, seed += 2, kSkinnyTokens);
    for (int64_t n : {17, 20, 32}) {
      const cuda::BandLayout l = cuda::band_layout({}, t, s.rows, s.cols, n, sms);
      const double e = run_band(p, {}, n, DType::f32, false);
      std::printf("[band %s %s n=%lld] %d clusters of %d, %d tiles, %d x %d tiles per warp, %d k-warps, %d stages: "
                  "rel err %.3g\n",
                  s.name, shape_name(p).c_str(), static_cast<long long>(n), l.clusters, l.cluster, l.tiles,
                  l.tile_warps, l.tiles_per_warp, l.k_warps, l.stages, e);
      EXPECT_LT(e, kTolerance) << s.name << " " << shape_name(p) << " n " << n;
    }
  }
}

// band_gemm_swiglu: near the float64 silu(gate) * up at every cluster size and grids of one
// block to one per SM, pair counts that leave the last run partial (so its gate box reads up
// rows, never stored) and gate rows not a multiple of 16 (37: the up rows start mid-tile), every
// count of 8-token tiles; then the 8B gate_up in the layout the backend runs.
TEST_P(BandTest, SwigluSmallAnd8BShapes) {
  const DType t = GetParam();
  const int sms = cuda::current_sm_count();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {37, 1000}, {300, 2056}, {4500, 136}, {14336, 4096}};
  uint32_t seed = 1700;
  for (auto [inter, cols] : shapes) {
    const bool large = inter * cols > 1'000'000;
    const Problem p = large ? large_problem(t, 2 * inter, cols, seed += 2, kSkinnyTokens)
                            : small_problem(t, 2 * inter, cols, seed += 2, kSkinnyTokens);
    for (int cluster : {0, 1, 2, 4}) {
      for (int blocks : {1, 8, 0}) {
        if (large && (cluster != 0 || blocks != 0)) continue;  // the 8B shape as the backend runs it
        const cuda::BandConfig c{cluster, blocks};
        for (int64_t n : {1, 9, 17, 20, 32}) {
          auto d_act = poisoned(static_cast<size_t>(n * inter) * dtype_size(t));
          const Status s = cuda::band_gemm_swiglu(c, t, p.d_w.get(), inter, cols, p.d_x.get(), n, d_act.get(), sms,
                                                  nullptr);
          ASSERT_TRUE(s.ok()) << s.to_string();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const double e = swiglu_error(p, inter, d_act, n);
          if (large) {
            const cuda::BandLayout l = cuda::band_layout({}, t, 2 * inter, cols, n, sms, true);
            std::printf("[band swiglu %lld x %lld n=%lld] %d clusters of %d, %d tiles, %d stages: rel err %.3g\n",
                        static_cast<long long>(inter), static_cast<long long>(cols), static_cast<long long>(n),
                        l.clusters, l.cluster, l.tiles, l.stages, e);
          }
          EXPECT_LT(e, swiglu_tolerance(t))
              << "inter " << inter << " cols " << cols << " " << band_name(c) << " n " << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BandTest, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(BandLayout, InvalidLayoutsShapesAndOutputsRefused) {
  const auto code = [](cuda::BandConfig c, DType t, int64_t rows, int64_t cols, int64_t n, DType y_type, bool acc,
                       int sms = 132) {
    return cuda::band_gemm(c, t, nullptr, rows, cols, nullptr, n, nullptr, y_type, acc, sms, nullptr).code();
  };
  const auto bad = ErrorCode::invalid_argument;
  EXPECT_EQ(code({3, 0}, DType::bf16, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({8, 0}, DType::bf16, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({0, -1}, DType::bf16, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({0, 0, 16}, DType::bf16, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({0, 0, 221}, DType::bf16, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 20, DType::f32, false, 0), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 12, 20, DType::f32, false), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 0, DType::f32, false), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 33, DType::f32, false), bad);
  EXPECT_EQ(code({}, DType::f32, 0, 64, 20, DType::f32, false), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 20, DType::f16, false), bad);
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 20, DType::bf16, true), bad);
  EXPECT_EQ(code({}, DType::bf16, -1, 64, 20, DType::f32, false), bad);
  // No rows: nothing to launch.
  EXPECT_EQ(code({}, DType::bf16, 0, 64, 20, DType::f32, true), ErrorCode::ok);
  EXPECT_EQ(code({4, 0}, DType::f16, 0, 64, 32, DType::f16, false), ErrorCode::ok);
  // The SwiGLU form: the same checks on W's 2 x inter rows; no rows, nothing launched.
  const auto glu = [](cuda::BandConfig c, DType t, int64_t inter, int64_t cols, int64_t n) {
    return cuda::band_gemm_swiglu(c, t, nullptr, inter, cols, nullptr, n, nullptr, 132, nullptr).code();
  };
  EXPECT_EQ(glu({3, 0}, DType::bf16, 0, 64, 20), bad);
  EXPECT_EQ(glu({}, DType::f32, 0, 64, 20), bad);
  EXPECT_EQ(glu({}, DType::bf16, 0, 12, 20), bad);
  EXPECT_EQ(glu({}, DType::bf16, 0, 64, 33), bad);
  EXPECT_EQ(glu({}, DType::bf16, -1, 64, 20), bad);
  EXPECT_EQ(glu({}, DType::bf16, (int64_t{1} << 29) + 1, 64, 20), bad);
  EXPECT_EQ(glu({}, DType::bf16, 0, 64, 20), ErrorCode::ok);
  // The parts form: 1..kBandMaxParts parts, never a cluster, the plain form's shape checks.
  const auto parts = [](cuda::BandConfig c, DType t, int64_t rows, int64_t cols, int64_t n, int n_parts) {
    return cuda::band_gemm_parts(c, t, nullptr, rows, cols, nullptr, n, nullptr, n_parts, 132, nullptr).code();
  };
  EXPECT_EQ(parts({}, DType::bf16, 0, 64, 20, 0), bad);
  EXPECT_EQ(parts({}, DType::bf16, 0, 64, 20, cuda::kBandMaxParts + 1), bad);
  EXPECT_EQ(parts({2, 0}, DType::bf16, 0, 64, 20, 4), bad);
  EXPECT_EQ(parts({}, DType::f32, 0, 64, 20, 4), bad);
  EXPECT_EQ(parts({}, DType::bf16, 0, 64, 33, 4), bad);
  EXPECT_EQ(parts({1, 0}, DType::f16, 0, 64, 20, cuda::kBandMaxParts), ErrorCode::ok);
  EXPECT_EQ(cuda::band_parts_layout({}, 4096, 20, 132, 0).clusters, 0);
}

}  // namespace
}  // namespace kernelllm
