// sample_block.h (the device sampler's algorithm) run on the host by blocks of std::threads:
// its fixed-point arithmetic, agreement with an exact long-double reference of sampler.h's
// semantics wherever u and top_p are not within 2e-5 of a step of the distribution, agreement
// with sample_token itself where logit / T is exact, independence from the thread count, and
// the edge rows (ties, infinities, NaN, greedy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "engine/philox.h"
#include "engine/sample_block.h"
#include "kernelllm/engine/sampler.h"
#include "unit/sample_block_host.h"

namespace kernelllm {
namespace {

using sample_block::Draw;
__extension__ using u128 = unsigned __int128;  // exact products for the checks

TEST(SampleBlock, WeightIsExpInFixedPoint) {
  EXPECT_EQ(sample_block::weight_of(3.5f, 3.5f, 0.7f), uint64_t{1} << 40);
  EXPECT_EQ(sample_block::weight_of(INFINITY, INFINITY, 1.0f), uint64_t{1} << 40);
  EXPECT_EQ(sample_block::weight_of(1.0f, INFINITY, 1.0f), 0u);
  EXPECT_EQ(sample_block::weight_of(-INFINITY, 0.0f, 1.0f), 0u);
  EXPECT_EQ(sample_block::weight_of(-30.0f, 0.0f, 1.0f), 0u);
  // Relative error against exp in double: the float series' rounding (~1e-6) plus the floor to
  // an integer, which matters only near the bottom (1 / (e^-27.9 * 2^40) ~ 1.2): checked from e^-14.
  double worst = 0;
  for (float d = -14.0f; d < 0.0f; d += 0.00173f) {
    const double exact = std::exp(static_cast<double>(d)) * 1099511627776.0;
    worst = std::max(worst, std::abs(static_cast<double>(sample_block::weight_of(d, 0.0f, 1.0f)) - exact) / exact);
  }
  EXPECT_GT(sample_block::weight_of(-27.5f, 0.0f, 1.0f), 0u);
  EXPECT_LT(worst, 1.5e-6);
}

TEST(SampleBlock, TargetsAreExactIntegerArithmetic) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t total = rng() >> (2 + rng() % 60);
    if (total == 0) continue;
    const float top_p = std::uniform_real_distribution<float>(1e-7f, 1.0f)(rng);
    if (!(top_p < 1.0f)) continue;
    // top_p = m * 2^(e - 24), m a 24-bit integer, e <= 0.
    int e = 0;
    const float frac = std::frexp(top_p, &e);
    const auto m = static_cast<u128>(std::ldexp(frac, 24));
    const u128 prod = m * total;
    const int s = 24 - e;
    u128 q = s >= 128 ? 0 : prod >> s;
    if (s >= 128 || (q << s) != prod) q += 1;
    EXPECT_EQ(sample_block::top_p_target(top_p, total), std::max<uint64_t>(1, static_cast<uint64_t>(q)))
        << total << " " << top_p;
    const auto u24 = static_cast<uint32_t>(rng() >> 40);
    EXPECT_EQ(sample_block::draw_target(u24, total),
              static_cast<uint64_t>((static_cast<u128>(total) * u24) >> 24) + 1);
  }
  EXPECT_EQ(sample_block::top_p_target(1e-30f, 5), 1u);
  EXPECT_EQ(sample_block::draw_target(0xFFFFFFu, uint64_t{1} << 40), (uint64_t{1} << 40) - (uint64_t{1} << 16) + 1);
}

TEST(SampleBlock, PhiloxU24IsUniform01sNumerator) {
  for (uint64_t s = 0; s < 200; ++s) {
    EXPECT_EQ(static_cast<float>(philox_u24(11, s, s * 3)) / 16777216.0f, uniform01(11, s, s * 3));
  }
}

TEST(SampleBlock, OrderKeyIsDescendingLogitWithNanLast) {
  const float xs[] = {INFINITY, 1e30f, 2.5f, 1e-40f, 0.0f, -0.0f, -1e-40f, -3.0f, -1e30f, -INFINITY};
  for (size_t i = 0; i + 1 < std::size(xs); ++i) {
    if (xs[i] == xs[i + 1]) {
      EXPECT_EQ(sample_block::key_of(xs[i]), sample_block::key_of(xs[i + 1]));
    } else {
      EXPECT_LT(sample_block::key_of(xs[i]), sample_block::key_of(xs[i + 1])) << xs[i];
    }
    EXPECT_EQ(sample_block::logit_of(sample_block::key_of(xs[i])), xs[i] + 0.0f);
  }
  EXPECT_LT(sample_block::key_of(-INFINITY), sample_block::key_of(NAN));
  EXPECT_EQ(sample_block::key_of(-NAN), sample_block::kNanKey);
}

struct Reference {
  int32_t token = 0;
  double margin = 0;  // how near u (or top_p) is to a step of the distribution, relative to the mass
};

// sampler.h's semantics in long double, ordering by logit (then id): temperature, top-k, top-p,
// inverse CDF at u. No NaN in the row.
Reference reference_draw(const std::vector<float>& row, const Draw& d) {
  const auto n = static_cast<int32_t>(row.size());
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)]; });
  if (d.temperature == 0.0f) return {order[0], 1.0};
  size_t kept = order.size();
  if (d.top_k > 0 && d.top_k < n) {
    const float kth = row[static_cast<size_t>(order[static_cast<size_t>(d.top_k - 1)])];
    kept = 0;
    while (kept < order.size() && row[static_cast<size_t>(order[kept])] >= kth) ++kept;
  }
  const long double top = row[static_cast<size_t>(order[0])];
  std::vector<long double> cum(kept);
  long double run = 0;
  for (size_t i = 0; i < kept; ++i) {
    run += std::exp((static_cast<long double>(row[static_cast<size_t>(order[i])]) - top) / d.temperature);
    cum[i] = run;
  }
  const long double total = run;
  double margin = 1.0;
  long double mass = total;
  if (d.top_p < 1.0f) {
    const long double target = static_cast<long double>(d.top_p) * total;
    size_t c = 0;
    while (c + 1 < kept && cum[c] < target) ++c;
    margin = static_cast<double>(std::abs(cum[c] - target) / total);
    if (c > 0) margin = std::min(margin, static_cast<double>(std::abs(cum[c - 1] - target) / total));
    kept = c + 1;
    mass = cum[c];
  }
  const long double u = static_cast<long double>(philox_u24(d.seed, d.index, d.step)) / 16777216.0L;
  const long double target = u * mass;
  size_t i = 0;
  while (i + 1 < kept && !(cum[i] > target)) ++i;
  margin = std::min(margin, static_cast<double>(std::abs(cum[i] - target) / mass));
  if (i > 0) margin = std::min(margin, static_cast<double>(std::abs(cum[i - 1] - target) / mass));
  return {order[i], margin};
}

// Rows of `vocab` logits: spread from flat to peaked, with and without ties. quantum > 0 rounds
// every logit to a multiple of it (so logit / T is exact for T a power of two).
std::vector<float> make_rows(int64_t vocab, float quantum, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> rows;
  const float spreads[] = {0.3f, 1.0f, 3.0f, 8.0f};
  for (float spread : spreads) {
    std::normal_distribution<float> normal(0.0f, spread);
    for (int64_t i = 0; i < vocab; ++i) {
      float x = normal(rng);
      if (quantum > 0) x = std::round(x / quantum) * quantum;
      rows.push_back(x);
    }
  }
  // Peaked: a few tokens far above the rest.
  for (int64_t i = 0; i < vocab; ++i) rows.push_back(std::round(std::normal_distribution<float>(0, 2)(rng)));
  rows[rows.size() - static_cast<size_t>(vocab) + 17] = 14.0f;
  rows[rows.size() - static_cast<size_t>(vocab) + 400] = 13.0f;
  rows[rows.size() - static_cast<size_t>(vocab) + 401] = 13.0f;
  // Ties everywhere: eight distinct values.
  for (int64_t i = 0; i < vocab; ++i) rows.push_back(static_cast<float>(rng() % 8) * 0.5f);
  return rows;
}

std::vector<Draw> make_draws(int64_t rows, const std::vector<float>& temperatures) {
  std::vector<Draw> draws;
  const float top_ps[] = {1.0f, 0.95f, 0.6f, 0.05f};
  const int32_t top_ks[] = {0, 1, 7, 300};
  uint64_t index = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (float t : temperatures) {
      for (float p : top_ps) {
        for (int32_t k : top_ks) {
          draws.push_back(Draw{r, t, p, k, 1234 + static_cast<uint64_t>(r), index++, 9});
        }
      }
    }
  }
  return draws;
}

TEST(SampleBlock, MatchesTheExactReferenceAwayFromSteps) {
  constexpr int64_t kVocab = 2000;
  const std::vector<float> logits = make_rows(kVocab, 0.0f, 1);
  const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
  const std::vector<Draw> draws = make_draws(rows, {0.6f, 1.0f, 1.7f});
  const std::vector<int32_t> got = testing::host_draw_tokens(logits, kVocab, draws, 16);
  ASSERT_EQ(got.size(), draws.size());
  int near_steps = 0;
  for (size_t i = 0; i < draws.size(); ++i) {
    const Draw& d = draws[i];
    const std::vector<float> row(logits.begin() + d.row * kVocab, logits.begin() + (d.row + 1) * kVocab);
    const Reference ref = reference_draw(row, d);
    if (ref.margin < 2e-5) {
      ++near_steps;
      continue;
    }
    EXPECT_EQ(got[i], ref.token) << "draw " << i << ": row " << d.row << " T " << d.temperature << " top_p "
                                 << d.top_p << " top_k " << d.top_k;
  }
  EXPECT_LT(near_steps, static_cast<int>(draws.size()) / 50);
}

TEST(SampleBlock, MatchesSampleTokenWhereScoresAreExact) {
  // Logits on a 1/64 grid and power-of-two temperatures: logit / T is exact, so sample_token's
  // order (by score) is the logits' order and only the arithmetic differs.
  constexpr int64_t kVocab = 1500;
  const std::vector<float> logits = make_rows(kVocab, 1.0f / 64, 2);
  const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
  const std::vector<Draw> draws = make_draws(rows, {0.5f, 1.0f, 2.0f});
  const std::vector<int32_t> got = testing::host_draw_tokens(logits, kVocab, draws, 8);
  ASSERT_EQ(got.size(), draws.size());
  int compared = 0;
  for (size_t i = 0; i < draws.size(); ++i) {
    const Draw& d = draws[i];
    const std::vector<float> row(logits.begin() + d.row * kVocab, logits.begin() + (d.row + 1) * kVocab);
    if (reference_draw(row, d).margin < 2e-5) continue;
    const SamplingParams params{d.temperature, d.top_p, d.top_k, d.seed};
    EXPECT_EQ(got[i], sample_token(row, params, d.index, d.step)) << "draw " << i;
    ++compared;
  }
  EXPECT_GT(compared, static_cast<int>(draws.size()) * 9 / 10);
}

TEST(SampleBlock, TokensDoNotDependOnTheThreadCount) {
  constexpr int64_t kVocab = 777;  // not a multiple of any block size below
  const std::vector<float> logits = make_rows(kVocab, 0.0f, 3);
  const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
  std::vector<Draw> draws = make_draws(rows, {0.8f});
  draws.resize(draws.size() / 2);
  const std::vector<int32_t> one = testing::host_draw_tokens(logits, kVocab, draws, 1);
  ASSERT_EQ(one.size(), draws.size());
  for (int threads : {3, 32, 100}) EXPECT_EQ(testing::host_draw_tokens(logits, kVocab, draws, threads), one);
}

TEST(SampleBlock, TokensDoNotDependOnHowManyBlocksShareTheRow) {
  // A cluster of blocks, each counting its share of the row (the device's layout at vocab
  // sizes like Llama-3's): the same tokens as one block, greedy and sampled.
  constexpr int64_t kVocab = 1001;
  const std::vector<float> logits = make_rows(kVocab, 0.0f, 4);
  const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
  std::vector<Draw> draws = make_draws(rows, {0.0f, 0.7f});
  draws.resize(draws.size() / 3);
  const std::vector<int32_t> one = testing::host_draw_tokens(logits, kVocab, draws, 8);
  ASSERT_EQ(one.size(), draws.size());
  for (const auto& [threads, blocks] : {std::pair{8, 2}, {5, 3}, {4, 8}, {32, 16}}) {
    EXPECT_EQ(testing::host_draw_tokens(logits, kVocab, draws, threads, blocks), one)
        << threads << " threads x " << blocks << " blocks";
  }
}

TEST(SampleBlock, BucketsGiveTheRadixSelectionsTokens) {
  // The coarse buckets and the gathered lists (the default) against radix selection over the
  // whole row (kForceRadix): the same token for every draw, on rows of Llama-3's vocabulary
  // from flat (a random-weight model's) to peaked, with the top-p cut and the draw in one
  // gather or two, top-k before them, and rows where a bucket holds more tokens than the list
  // takes (many equal logits: the radix path serves). One block and groups of blocks.
  constexpr int64_t kVocab = 128256;
  std::mt19937_64 rng(21);
  std::vector<float> logits;
  for (float spread : {0.02f, 0.3f, 2.5f}) {
    std::normal_distribution<float> normal(0.0f, spread);
    for (int64_t i = 0; i < kVocab; ++i) logits.push_back(normal(rng));
  }
  for (int j = 0; j < 5; ++j) logits[static_cast<size_t>(2 * kVocab) + rng() % kVocab] = 12.0f + static_cast<float>(j);
  for (int64_t i = 0; i < kVocab; ++i) logits.push_back(static_cast<float>(rng() % 5) * 0.25f);  // 5 values
  // Mostly one value, a few above it: every token of positive weight but those in one bucket.
  for (int64_t i = 0; i < kVocab; ++i) logits.push_back(i % 997 == 0 ? 1.0f + static_cast<float>(i % 7) * 0.01f : 0.5f);
  const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
  std::vector<Draw> draws;
  uint64_t index = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (const auto& [t, p, k] : {std::tuple{0.6f, 0.95f, 0}, {1.0f, 0.97f, 0}, {0.6f, 1.0f, 0}, {0.6f, 0.95f, 50},
                                  {1.3f, 0.5f, 0}, {0.2f, 0.999f, 0}, {0.6f, 0.05f, 0}, {0.6f, 0.95f, 20000}}) {
      for (int s = 0; s < 3; ++s) draws.push_back(Draw{r, t, p, k, 99, index++, static_cast<uint64_t>(s)});
    }
  }
  std::vector<Draw> radix = draws;
  for (Draw& d : radix) d.flags = sample_block::kForceRadix;
  const std::vector<int32_t> want = testing::host_draw_tokens(logits, kVocab, radix, 32);
  ASSERT_EQ(want.size(), draws.size());
  for (const auto& [threads, blocks] : {std::pair{32, 1}, {16, 4}, {8, 16}}) {
    const std::vector<int32_t> got = testing::host_draw_tokens(logits, kVocab, draws, threads, blocks);
    ASSERT_EQ(got.size(), draws.size()) << threads << " threads x " << blocks << " blocks: threads disagree";
    for (size_t i = 0; i < draws.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << "draw " << i << ": row " << draws[i].row << " T " << draws[i].temperature
                                 << " top_p " << draws[i].top_p << " top_k " << draws[i].top_k << ", " << threads
                                 << " threads x " << blocks << " blocks";
    }
  }
}

int32_t draw_one(const std::vector<float>& row, const Draw& d, int threads = 4) {
  const std::vector<int32_t> got =
      testing::host_draw_tokens(row, static_cast<int64_t>(row.size()), std::span<const Draw>(&d, 1), threads);
  return got.empty() ? -1 : got[0];
}

TEST(SampleBlock, GreedyIsSamplersArgmax) {
  const std::vector<std::vector<float>> rows = {
      {1, 3, 3, 2},           {NAN, 1, 5},       {1, NAN, 5, 5}, {-INFINITY, -INFINITY},
      {NAN, NAN},             {2, INFINITY, 7, INFINITY}, {-0.0f, 0.0f}, {-5, -1, -1, -7},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(draw_one(row, Draw{0, 0.0f, 0.9f, 3, 1, 2, 3}), argmax(row)) << row[0];
  }
}

TEST(SampleBlock, EqualLogitsDrawUniformlyByU) {
  // n equal weights: the drawn token is floor(u * n).
  const std::vector<float> row(1000, 2.0f);
  for (uint64_t s = 0; s < 40; ++s) {
    const Draw d{0, 0.7f, 1.0f, 0, 5, s, 0};
    const uint32_t u24 = philox_u24(d.seed, d.index, d.step);
    EXPECT_EQ(draw_one(row, d), static_cast<int32_t>((uint64_t{u24} * 1000) >> 24));
  }
}

TEST(SampleBlock, NonFiniteRows) {
  // NaN never drawn; an infinite largest logit: uniform over the tokens holding it.
  std::vector<float> row = {NAN, 1.0f, NAN, 1.0f, NAN};
  for (uint64_t s = 0; s < 30; ++s) {
    const int32_t t = draw_one(row, Draw{0, 1.0f, 1.0f, 0, 9, s, 0});
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  EXPECT_EQ(draw_one({NAN, NAN, NAN}, Draw{0, 1.0f, 0.5f, 2, 9, 0, 0}), 0);
  row = {0.0f, INFINITY, 3.0f, INFINITY, -INFINITY};
  int seen1 = 0, seen3 = 0;
  for (uint64_t s = 0; s < 60; ++s) {
    const int32_t t = draw_one(row, Draw{0, 1.0f, 1.0f, 0, 9, s, 0});
    seen1 += t == 1;
    seen3 += t == 3;
  }
  EXPECT_EQ(seen1 + seen3, 60);
  EXPECT_GT(seen1, 10);
  EXPECT_GT(seen3, 10);
  // Only -inf (and NaN): the -inf tokens, uniformly.
  for (uint64_t s = 0; s < 20; ++s) {
    const int32_t t = draw_one({NAN, -INFINITY, -INFINITY}, Draw{0, 1.0f, 0.3f, 0, 9, s, 0});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(SampleBlock, TopKOfOneAndTinyTopPAreGreedy) {
  std::vector<float> row = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f};
  for (uint64_t s = 0; s < 20; ++s) {
    // The shortest top-p prefix is the first of the two largest logits.
    EXPECT_EQ(draw_one(row, Draw{0, 1.3f, 1e-6f, 0, 2, s, 1}), 1);
    // top_k keeps ties at the k-th: 1 and 3 share the largest logit.
    const int32_t t = draw_one(row, Draw{0, 1.3f, 1.0f, 1, 2, s, 1});
    EXPECT_TRUE(t == 1 || t == 3);
  }
}

}  // namespace
}  // namespace kernelllm
