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

  // Softmax over the kept set (the removed tokens are -inf in HF, i.e. zero mass).
  double max_score = -INFINITY;
  for (int32_t id : order) max_score = std::max(max_score, static_cast<double>(scores[static_cast<size_t>(id)]));
  std::vector<double> weight(logits.size(), 0.0);
  double total = 0.0;
  for (int32_t id : order) {
    const double w = std::exp(static_cast<double>(scores[static_cast<size_t>(id)]) - max_score);
    weight[static_cast<size_t>(id)] = w;
    total += w;
  }

  if (params.top_p >= 1.0f) {
    std::sort(order.begin(), order.end(), desc);
  } else {
    // HF drops token j when the ascending cumulative mass up to and including j (the mass of j
    // and every less likely token) is <= 1 - top_p, i.e. keeps j while the mass strictly
    // above it is < top_p. Only the head of the distribution needs sorting: grow a sorted
    // prefix until it holds >= top_p of the mass (or everything).
    const double keep_mass = static_cast<double>(params.top_p) * total;
    size_t sorted = std::min<size_t>(kept, 256);
    for (;;) {
      if (sorted == kept) {
        std::sort(order.begin(), order.end(), desc);
      } else {
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(sorted), order.end(), desc);
      }
      double head = 0.0;
      for (size_t i = 0; i < sorted; ++i) head += weight[static_cast<size_t>(order[i])];
      if (head >= keep_mass || sorted == kept) break;
      sorted = sorted * 16 >= kept / 2 ? kept : sorted * 16;
    }
    size_t new_kept = 1;
    double above = weight[static_cast<size_t>(order[0])];
    while (new_kept < sorted && above < keep_mass) {
      above += weight[static_cast<size_t>(order[new_kept])];
      ++new_kept;
    }
    kept = new_kept;
    order.resize(kept);
    total = above;
  }
  std::vector<double> prob(kept);
  for (size_t i = 0; i < kept; ++i) prob[i] = weight[static_cast<size_t>(order[i])] / total;

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
