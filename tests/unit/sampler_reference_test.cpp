// candidate_set and sample_token against the plain algorithm they must reproduce bit for bit
// (full sort, double weights, HF's cumulative top-p rule) on random rows of every shape the
// fast path treats specially, and draw_tokens against one-by-one sample_token.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/sample_step.h"
#include "kernelllm/engine/sampler.h"

namespace kernelllm {
namespace {

// The sampler as first written: sort every id (descending score, lower id first), top-k keeps
// every id scoring >= the k-th, softmax in double over the kept ids summed in id order, top-p
// keeps the shortest sorted prefix whose mass reaches top_p * total (at least one id).
std::vector<Candidate> reference_candidates(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  if (n == 0) return {};
  if (p.temperature == 0.0f) {
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    return {Candidate{static_cast<int32_t>(best), 1.0f}};
  }
  std::vector<float> score(n);
  for (size_t i = 0; i < n; ++i) score[i] = logits[i] / p.temperature;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  size_t kept = n;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    const float kth = score[order[p.top_k - 1]];
    kept = static_cast<size_t>(std::count_if(score.begin(), score.end(), [&](float s) { return s >= kth; }));
  }
  order.resize(kept);
  std::vector<bool> in_set(n, false);
  for (int32_t id : order) in_set[id] = true;
  double max_score = -INFINITY;
  for (int32_t id : order) max_score = std::max(max_score, static_cast<double>(score[id]));
  std::vector<double> weight(n, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!in_set[i]) continue;
    weight[i] = std::exp(static_cast<double>(score[i]) - max_score);
    total += weight[i];
  }
  if (p.top_p < 1.0f) {
    const double keep_mass = static_cast<double>(p.top_p) * total;
    size_t m = 1;
    double above = weight[order[0]];
    while (m < kept && above < keep_mass) above += weight[order[m++]];
    order.resize(m);
    total = above;
  }
  std::vector<Candidate> out;
  for (int32_t id : order) out.push_back(Candidate{id, static_cast<float>(weight[id] / total)});
  return out;
}

// sample_token's inverse CDF over the reference candidates.
int32_t reference_draw(const std::vector<Candidate>& cands, const SamplingParams& p, uint64_t index, uint64_t step) {
  if (cands.empty()) return 0;
  if (p.temperature == 0.0f) return cands[0].id;
  const double u = uniform01(p.seed, index, step);
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.prob;
    if (u < cum) return c.id;
  }
  return cands.back().id;
}

std::string describe(const std::string& shape, size_t vocab, const SamplingParams& p) {
  return shape + " vocab " + std::to_string(vocab) + " T " + std::to_string(p.temperature) + " top_p " +
         std::to_string(p.top_p) + " top_k " + std::to_string(p.top_k);
}

// Same ids, order and probabilities (as bits), and the same token for several draws.
void expect_matches_reference(const std::vector<float>& logits, const SamplingParams& p, const std::string& what) {
  const std::vector<Candidate> got = candidate_set(logits, p);
  const std::vector<Candidate> want = reference_candidates(logits, p);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].id, want[i].id) << what << " rank " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i].prob), std::bit_cast<uint32_t>(want[i].prob))
        << what << " rank " << i << ": " << got[i].prob << " vs " << want[i].prob;
  }
  for (uint64_t d = 0; d < 8; ++d) {
    const uint64_t index = d % 3, step = d * 37;
    ASSERT_EQ(sample_token(logits, p, index, step), reference_draw(want, p, index, step))
        << what << " index " << index << " step " << step;
  }
}

enum class Shape { flat, peaked4, peaked12, ties, neg_inf, equal_blocks, signed_zeros, huge };

std::vector<float> make_row(Shape shape, size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n);
  for (float& x : row) {
    switch (shape) {
      case Shape::flat: x = normal(rng); break;
      case Shape::peaked4: x = 4.0f * normal(rng); break;
      case Shape::peaked12: x = 12.0f * normal(rng); break;
      // Few distinct values: long runs of exact ties, also where top-p cuts.
      case Shape::ties: x = std::round(2.0f * normal(rng)) * 0.5f; break;
      case Shape::neg_inf: x = rng() % 3 == 0 ? -INFINITY : 3.0f * normal(rng); break;
      // Weights 1, 2, 4, 8 (up to float rounding): top_p * total lands on prefix sums.
      case Shape::equal_blocks: x = static_cast<float>(rng() % 4) * 0.6931472f; break;
      case Shape::signed_zeros: x = rng() % 5 == 0 ? 1.0f : (rng() % 2 == 0 ? -0.0f : 0.0f); break;
      case Shape::huge: x = 1e30f * normal(rng); break;
    }
  }
  return row;
}

const char* shape_name(Shape s) {
  switch (s) {
    case Shape::flat: return "flat";
    case Shape::peaked4: return "peaked4";
    case Shape::peaked12: return "peaked12";
    case Shape::ties: return "ties";
    case Shape::neg_inf: return "neg_inf";
    case Shape::equal_blocks: return "equal_blocks";
    case Shape::signed_zeros: return "signed_zeros";
    case Shape::huge: return "huge";
  }
  return "?";
}

constexpr Shape kShapes[] = {Shape::flat,     Shape::peaked4,      Shape::peaked12,     Shape::ties,
                             Shape::neg_inf,  Shape::equal_blocks, Shape::signed_zeros, Shape::huge};
constexpr float kTemperatures[] = {0.2f, 0.6f, 1.0f, 1.7f};
constexpr float kTopPs[] = {0.1f, 0.5f, 0.95f, 0.999f, 1.0f};

TEST(SamplerReference, SmallAndMediumRowsMatchThePlainSortBitForBit) {
  std::mt19937_64 rng(20240611);
  for (size_t n : {1u, 2u, 3u, 7u, 100u, 1000u, 5000u}) {
    for (Shape shape : kShapes) {
      for (int rep = 0; rep < 2; ++rep) {
        const std::vector<float> row = make_row(shape, n, rng);
        for (float t : kTemperatures) {
          for (float top_p : kTopPs) {
            for (int32_t top_k : {0, 1, 3, 50, static_cast<int32_t>(n)}) {
              const SamplingParams p{t, top_p, top_k, rng()};
              expect_matches_reference(row, p, describe(shape_name(shape), n, p));
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(SamplerReference, LlamaSizedRowsMatchThePlainSortBitForBit) {
  std::mt19937_64 rng(7);
  constexpr size_t kVocab = 128256;
  for (Shape shape : {Shape::flat, Shape::peaked4, Shape::peaked12, Shape::ties, Shape::neg_inf}) {
    const std::vector<float> row = make_row(shape, kVocab, rng);
    for (float t : {0.6f, 1.7f}) {
      if (t != 0.6f && shape != Shape::flat && shape != Shape::peaked12) continue;  // keep it under ~1 s
      for (float top_p : kTopPs) {
        const SamplingParams p{t, top_p, 0, rng()};
        expect_matches_reference(row, p, describe(shape_name(shape), kVocab, p));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(SamplerReference, TopPExactlyOnAPrefixSumKeepsThatPrefix) {
  // Four equal weights: top_p 0.5 needs exactly two (mass 2 of 4 reaches 0.5 * 4), 0.75 three.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f, -INFINITY};
  for (float top_p : {0.25f, 0.5f, 0.75f}) {
    const SamplingParams p{1.0f, top_p, 0, 3};
    const std::vector<Candidate> cands = candidate_set(logits, p);
    ASSERT_EQ(cands.size(), static_cast<size_t>(top_p * 4)) << top_p;
    for (size_t i = 0; i < cands.size(); ++i) EXPECT_EQ(cands[i].id, static_cast<int32_t>(i));
    expect_matches_reference(logits, p, "four equal, top_p " + std::to_string(top_p));
  }
}

TEST(SamplerReference, RowsTheFastPathHandsBackStillMatch) {
  // NaN logits, an infinite score (finite logit / tiny temperature), every id -inf.
  const std::vector<std::vector<float>> rows = {
      {0.5f, NAN, 1.0f}, {1e38f, 0.0f, -1.0f}, {INFINITY, 1.0f, 2.0f}, {-INFINITY, -INFINITY, -INFINITY}};
  for (const auto& row : rows) {
    for (float top_p : {0.5f, 1.0f}) {
      const SamplingParams p{0.01f, top_p, 0, 5};
      const std::vector<Candidate> got = candidate_set(row, p);
      const std::vector<Candidate> want = reference_candidates(row, p);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].id, want[i].id);
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i].prob), std::bit_cast<uint32_t>(want[i].prob));
      }
    }
  }
}

TEST(DrawTokens, EqualsSampleTokenOneByOne) {
  std::mt19937_64 rng(11);
  constexpr size_t kVocab = 3000;
  std::vector<std::vector<float>> rows;
  for (Shape shape : kShapes) rows.push_back(make_row(shape, kVocab, rng));
  const SamplingParams params[] = {{0.6f, 0.95f, 0, 1}, {1.0f, 1.0f, 0, 2}, {0.0f, 1.0f, 0, 3}, {0.8f, 0.9f, 40, 4}};
  std::vector<TokenDraw> draws;
  for (uint64_t i = 0; i < 37; ++i) {
    draws.push_back(TokenDraw{rows[i % rows.size()], &params[i % 4], i, 3 * i + 1});
  }
  draw_tokens(draws);
  for (const TokenDraw& d : draws) {
    EXPECT_EQ(d.token, sample_token(d.row, *d.params, d.index, d.step)) << "index " << d.index;
  }
}

}  // namespace
}  // namespace kernelllm
