// Sampler: Philox known answers, HF warper semantics (temperature, top-k, top-p),
// reproducibility by (seed, sample, step), and empirical frequencies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "kernelllm/engine/sampler.h"

namespace kernelllm {
namespace {

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::set<int32_t> ids_of(const std::vector<Candidate>& cands) {
  std::set<int32_t> out;
  for (const auto& c : cands) out.insert(c.id);
  return out;
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    uint64_t seed, sample, step;
    std::array<uint32_t, 4> expect;
  };
  const Kat kats[] = {
      {0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {~0ull, ~0ull, ~0ull, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) EXPECT_EQ(philox4x32(k.seed, k.sample, k.step), k.expect);
}

TEST(Philox, Uniform01IsInUnitIntervalAndUsesTheFirstWord) {
  for (uint64_t s = 0; s < 1000; ++s) {
    const float u = uniform01(7, s, 3);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    EXPECT_EQ(u, static_cast<float>(philox4x32(7, s, 3)[0] >> 8) / 16777216.0f);
  }
}

TEST(Sampler, ValidateRejectsBadParams) {
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  EXPECT_TRUE(validate(SamplingParams{0.0f, 1.0f, 0, 1}).ok());
  const SamplingParams bad[] = {
      {-0.1f, 1.0f, 0, 0}, {NAN, 1.0f, 0, 0}, {INFINITY, 1.0f, 0, 0}, {1.0f, 0.0f, 0, 0},
      {1.0f, 1.5f, 0, 0},  {1.0f, NAN, 0, 0}, {1.0f, -0.5f, 0, 0},    {1.0f, 1.0f, -1, 0},
  };
  for (const auto& p : bad) {
    const Status s = validate(p);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  }
}

TEST(Sampler, TopKKeepsExactlyTheKLargest) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.5f, 0.7f, 2.2f, -3.0f, 1.9f};
  struct Case {
    int32_t k;
    std::set<int32_t> expect;
  };
  const Case cases[] = {{1, {3}}, {2, {3, 5}}, {3, {3, 5, 1}}, {5, {3, 5, 1, 7, 4}}, {0, {0, 1, 2, 3, 4, 5, 6, 7}}};
  for (const auto& c : cases) {
    SamplingParams p{1.0f, 1.0f, c.k, 0};
    const auto cands = candidate_set(logits, p);
    EXPECT_EQ(ids_of(cands), c.expect) << "k=" << c.k;
    double total = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      total += cands[i].prob;
      if (i > 0) {
        EXPECT_GE(cands[i - 1].prob, cands[i].prob);
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-6);
  }
}

TEST(Sampler, TopPKeepsSmallestSetAboveP) {
  // probs 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1.
  const auto logits = log_probs({0.3, 0.05, 0.5, 0.15});
  struct Case {
    float top_p;
    std::vector<int32_t> ids;
    std::vector<float> probs;
  };
  const Case cases[] = {
      {0.75f, {2, 0}, {0.625f, 0.375f}},                       // 0.5 + 0.3 = 0.8 >= 0.75
      {0.9f, {2, 0, 3}, {0.5f / 0.95f, 0.3f / 0.95f, 0.15f / 0.95f}},
      {0.4f, {2}, {1.0f}},                                      // the top token alone suffices
      {0.01f, {2}, {1.0f}},                                     // always at least one
  };
  for (const auto& c : cases) {
    const auto cands = candidate_set(logits, SamplingParams{1.0f, c.top_p, 0, 0});
    ASSERT_EQ(cands.size(), c.ids.size()) << "top_p=" << c.top_p;
    for (size_t i = 0; i < cands.size(); ++i) {
      EXPECT_EQ(cands[i].id, c.ids[i]);
      EXPECT_NEAR(cands[i].prob, c.probs[i], 1e-5);
    }
  }
}

// HF TopPLogitsWarper written out: ascending sort, cumulative softmax, drop <= 1 - top_p.
std::set<int32_t> reference_top_p(const std::vector<float>& logits, float top_p) {
  std::vector<int32_t> asc(logits.size());
  for (size_t i = 0; i < asc.size(); ++i) asc[i] = static_cast<int32_t>(i);
  std::sort(asc.begin(), asc.end(), [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
  double m = *std::max_element(logits.begin(), logits.end()), total = 0;
  for (float l : logits) total += std::exp(l - m);
  double cum = 0;
  std::set<int32_t> kept;
  for (size_t i = 0; i < asc.size(); ++i) {
    cum += std::exp(logits[asc[i]] - m) / total;
    if (cum > 1.0 - top_p || i + 1 == asc.size()) kept.insert(asc[i]);
  }
  return kept;
}

TEST(Sampler, TopPMatchesHfOnLargeFlatAndPeakedDistributions) {
  for (int shape = 0; shape < 3; ++shape) {
    std::vector<float> logits(5000);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double r = std::sin(static_cast<double>(i) * 12.9898) * 43758.5453;
      const double noise = r - std::floor(r);
      logits[i] = static_cast<float>(shape == 0 ? noise : shape == 1 ? 8.0 * noise : 30.0 * noise * noise);
    }
    for (float top_p : {0.3f, 0.9f, 0.99f}) {
      const auto cands = candidate_set(logits, SamplingParams{1.0f, top_p, 0, 0});
      EXPECT_EQ(ids_of(cands), reference_top_p(logits, top_p)) << "shape " << shape << " top_p " << top_p;
    }
  }
}

TEST(Sampler, AppliesTemperatureThenTopKThenTopP) {
  // At temperature 2 the probs of ids 0..3 flatten; top-k 3 drops id 3; top-p then acts on the
  // renormalized three.
  const auto logits = log_probs({0.4, 0.3, 0.2, 0.1});
  const auto cands = candidate_set(logits, SamplingParams{2.0f, 0.6f, 3, 0});
  std::vector<double> w = {std::sqrt(0.4), std::sqrt(0.3), std::sqrt(0.2)};
  const double z = w[0] + w[1] + w[2];
  // Ascending mass: id2 = w2/z = 0.276 <= 0.4 dropped; id1 adds 0.327 → 0.60 > 0.4 kept.
  ASSERT_EQ(cands.size(), 2u);
  EXPECT_EQ(cands[0].id, 0);
  EXPECT_EQ(cands[1].id, 1);
  EXPECT_NEAR(cands[0].prob, w[0] / (w[0] + w[1]), 1e-6);
  EXPECT_LT(w[2] / z, 0.4);
}

TEST(Sampler, TemperatureZeroIsArgmaxWithLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 5.0f, 2.0f, 5.0f};
  SamplingParams p{0.0f, 0.5f, 2, 99};
  for (uint64_t step = 0; step < 10; ++step) EXPECT_EQ(sample_token(logits, p, 3, step), 1);
  const auto cands = candidate_set(logits, p);
  ASSERT_EQ(cands.size(), 1u);
  EXPECT_EQ(cands[0].id, 1);
}

TEST(Sampler, SmallTemperatureLimitEqualsGreedy) {
  // Scores spaced 0.01 apart in a scrambled order: at T=1e-4 the top token has mass ~1.
  std::vector<float> logits(1000);
  for (int i = 0; i < 1000; ++i) logits[static_cast<size_t>(i)] = static_cast<float>((i * 617) % 1000) * 0.01f;
  const int32_t greedy = sample_token(logits, SamplingParams{0.0f, 1.0f, 0, 0}, 0, 0);
  EXPECT_EQ(greedy, static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  for (uint64_t step = 0; step < 200; ++step) {
    EXPECT_EQ(sample_token(logits, SamplingParams{1e-4f, 1.0f, 0, 42}, step % 7, step), greedy);
  }
}

TEST(Sampler, SeedsReproduceAndSampleStepPairsDiffer) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  const SamplingParams p{1.0f, 1.0f, 0, 1234};
  std::vector<int32_t> a, b, other_sample, other_seed;
  for (uint64_t step = 0; step < 64; ++step) {
    a.push_back(sample_token(logits, p, 0, step));
    b.push_back(sample_token(logits, p, 0, step));
    other_sample.push_back(sample_token(logits, p, 1, step));
    other_seed.push_back(sample_token(logits, SamplingParams{1.0f, 1.0f, 0, 1235}, 0, step));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_sample);
  EXPECT_NE(a, other_seed);
  EXPECT_NE(uniform01(5, 0, 1), uniform01(5, 1, 0));  // the counter words are not symmetric
}

TEST(Sampler, EmpiricalFrequenciesMatchProbabilities) {
  struct Case {
    SamplingParams params;
    std::vector<double> expect;  // per id, after warping
  };
  const auto logits = log_probs({0.4, 0.3, 0.2, 0.1});
  const Case cases[] = {
      {{1.0f, 1.0f, 0, 7}, {0.4, 0.3, 0.2, 0.1}},
      {{1.0f, 1.0f, 2, 8}, {0.4 / 0.7, 0.3 / 0.7, 0.0, 0.0}},
      {{1.0f, 0.85f, 0, 9}, {0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0.0}},
  };
  constexpr int kDraws = 40000;
  for (const auto& c : cases) {
    std::vector<double> count(4, 0.0);
    for (int d = 0; d < kDraws; ++d) {
      count[static_cast<size_t>(sample_token(logits, c.params, static_cast<uint64_t>(d % 5),
                                             static_cast<uint64_t>(d / 5)))] += 1;
    }
    double chi2 = 0;
    int dof = -1;
    for (size_t i = 0; i < 4; ++i) {
      if (c.expect[i] == 0.0) {
        EXPECT_EQ(count[i], 0.0) << "id " << i << " should never be drawn";
        continue;
      }
      const double e = c.expect[i] * kDraws;
      chi2 += (count[i] - e) * (count[i] - e) / e;
      ++dof;
    }
    // 99.9th percentile of chi-square with 1..3 degrees of freedom is below 16.3.
    EXPECT_LT(chi2, 16.3) << "dof " << dof;
  }
}

// The two-pass argmax against the one-pass definition, on rows built to hit its corners: ties
// (first index wins), NaN (never larger; at index 0 it wins), -0/+0, infinities, lengths that
// are not a multiple of the 8 lanes, and a 128k row.
TEST(Sampler, ArgmaxMatchesTheOnePassDefinition) {
  auto reference = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (size_t i = 1; i < x.size(); ++i) {
      if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best;
  };
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<std::vector<float>> rows = {
      {1.0f},           {0.0f, -0.0f},     {-0.0f, 0.0f},       {nan, 5.0f, 7.0f}, {1.0f, nan, 3.0f, nan},
      {-inf, -inf},     {2.0f, inf, inf},  {3.0f, 3.0f, 3.0f},  {nan, nan},        {-1.0f, -2.0f, nan, -0.5f}};
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  for (size_t len : {2u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 1000u, 128256u}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> x(len);
      for (float& v : x) v = static_cast<float>(next() % 64) - 32.0f;  // many ties
      if (rep % 4 == 1) x[next() % len] = nan;
      if (rep % 4 == 2) x[next() % len] = 31.0f, x[next() % len] = 31.0f;
      if (rep % 5 == 3) x[next() % len] = inf;
      rows.push_back(std::move(x));
    }
  }
  for (const auto& x : rows) {
    EXPECT_EQ(argmax(x), reference(x)) << "length " << x.size();
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    EXPECT_EQ(sample_token(x, greedy, 0, 0), reference(x));
  }
}

}  // namespace
}  // namespace kernelllm
