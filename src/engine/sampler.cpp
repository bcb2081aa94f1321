// Sampling: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11; Random123's constants) and HF's logits warpers in HF's order: temperature
// (TemperatureLogitsWarper), top-k (TopKLogitsWarper: keeps every token >= the k-th largest
// score, so ties at the boundary are kept), top-p (TopPLogitsWarper: sort ascending, drop
// tokens whose cumulative probability is <= 1 - top_p, keep at least one).
#include "kernelllm/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kernelllm {

Status validate(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return error(ErrorCode::invalid_argument,
                 "sampling: expected a finite temperature >= 0, found " + std::to_string(params.temperature));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return error(ErrorCode::invalid_argument,
                 "sampling: expected top_p in (0, 1], found " + std::to_string(params.top_p));
  }
  if (params.top_k < 0) {
    return error(ErrorCode::invalid_argument,
                 "sampling: expected top_k >= 0 (0 disables), found " + std::to_string(params.top_k));
  }
  return Status::ok_status();
}

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t sample_index, uint64_t step) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(sample_index), static_cast<uint32_t>(sample_index >> 32),
                               static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)};
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * c[0];
    const uint64_t p1 = uint64_t{kMul1} * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

float uniform01(uint64_t seed, uint64_t sample_index, uint64_t step) {
  const uint32_t word = philox4x32(seed, sample_index, step)[0];
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

namespace {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

std::vector<Candidate> candidate_set(std::span<const float> logits, const SamplingParams& params) {
  if (logits.empty()) return {};
  if (params.temperature == 0.0f) return {Candidate{argmax(logits), 1.0f}};

  std::vector<float> scores(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) scores[i] = logits[i] / params.temperature;

  // Descending by score, lower id first on ties.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto desc = [&](int32_t a, int32_t b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa > sb || (sa == sb && a < b);
  };
  size_t kept = order.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < order.size()) {
    const auto k = static_cast<size_t>(params.top_k);
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(), desc);
    const float kth = scores[static_cast<size_t>(order[k - 1])];
    auto mid = std::partition(order.begin(), order.end(),
                              [&](int32_t id) { return scores[static_cast<size_t>(id)] >= kth; });
    kept = static_cast<size_t>(mid - order.begin());
  }
  order.resize(kept);
  std::sort(order.begin(), order.end(), desc);

  // Softmax over the kept set (the removed tokens are -inf in HF, i.e. zero mass).
  const double max_score = scores[static_cast<size_t>(order[0])];
  std::vector<double> prob(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    prob[i] = std::exp(static_cast<double>(scores[static_cast<size_t>(order[i])]) - max_score);
    total += prob[i];
  }
  for (double& p : prob) p /= total;

  if (params.top_p < 1.0f) {
    // Ascending cumulative mass of token i = mass of i and every less likely token.
    const double drop_below = 1.0 - static_cast<double>(params.top_p);
    double tail = 0.0;
    size_t new_kept = kept;
    for (size_t i = kept; i-- > 1;) {
      tail += prob[i];
      if (tail > drop_below) break;
      new_kept = i;
    }
    kept = new_kept;
    order.resize(kept);
    prob.resize(kept);
    total = std::accumulate(prob.begin(), prob.end(), 0.0);
    for (double& p : prob) p /= total;
  }

  std::vector<Candidate> out(kept);
  for (size_t i = 0; i < kept; ++i) out[i] = Candidate{order[i], static_cast<float>(prob[i])};
  return out;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sample_index,
                     uint64_t step) {
  if (params.temperature == 0.0f) return argmax(logits);
  const std::vector<Candidate> cands = candidate_set(logits, params);
  if (cands.empty()) return 0;
  const double u = uniform01(params.seed, sample_index, step);
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.prob;
    if (u < cum) return c.id;
  }
  return cands.back().id;
}

}  // namespace kernelllm
