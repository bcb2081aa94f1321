// Sampling: Philox-4x32-10 (philox.h) and HF's logits warpers in HF's order: temperature
// (TemperatureLogitsWarper), top-k (TopKLogitsWarper: keeps every token >= the k-th largest
// score, so ties at the boundary are kept), top-p (TopPLogitsWarper: sort ascending, drop
// tokens whose cumulative probability is <= 1 - top_p, keep at least one).
#include "kernelllm/engine/sampler.h"

#include "engine/philox.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace kernelllm {

Status validate(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("sampling: expected a finite temperature >= 0, found {}", params.temperature));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("sampling: expected top_p in (0, 1], found {}", params.top_p));
  }
  if (params.top_k < 0) {
    return error(ErrorCode::invalid_argument,
                 "sampling: expected top_k >= 0 (0 disables), found " + std::to_string(params.top_k));
  }
  return Status::ok_status();
}

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t sample_index, uint64_t step) {
  std::array<uint32_t, 4> out;
  philox4x32_10(seed, sample_index, step, out.data());
  return out;
}

float uniform01(uint64_t seed, uint64_t sample_index, uint64_t step) {
  return static_cast<float>(philox_u24(seed, sample_index, step)) * (1.0f / 16777216.0f);
}

// The first index of the largest value, NaNs never larger (a NaN at 0 wins: nothing compares
// above it), as the one-pass `if (x[i] > x[best]) best = i` has it. Two passes so that the hot
// one is a plain max over 8 independent lanes (no index to carry, no reload of x[best]).
// Measured on a 2-core VM (g++ 12 -O3, 128k row, machine busy): ~145 us against ~170 us for the
// one-pass loop and ~330 us for std::max_element. A decode step draws one per sequence.
int32_t argmax(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0 || std::isnan(logits[0])) return 0;
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, logits[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane[l] = logits[i + l] > lane[l] ? logits[i + l] : lane[l];
  }
  float m = lane[0];
  for (size_t l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  for (; i < n; ++i) m = logits[i] > m ? logits[i] : m;
  for (size_t j = 0; j < n; ++j) {
    if (logits[j] == m) return static_cast<int32_t>(j);
  }
  return 0;  // unreachable: m is one of the values
}

namespace {

// The plain algorithm: sort (a prefix of) every id by score. Used for top-k, whose softmax
// sums the kept ids in the order nth_element leaves them, and for rows with NaN or an
// infinite max score; the fast path below reproduces it bit for bit everywhere else.
std::vector<Candidate> candidate_set_general(std::span<const float> logits, const SamplingParams& params) {
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

// Fast path (no top-k). The general path's result depends only on the full descending order
// and on total = sum of exp(score - max) in id order. (1) Only a head of the order is needed:
// every id scoring >= some threshold t is exactly a prefix of it, so collect those and sort
// just them, lowering t until the prefix holds the mass top-p needs. (2) top-p compares
// prefix sums with top_p * total; an estimate of total within 4e-6 decides nearly every
// comparison, and the exact sum is computed only when one falls inside that margin.
// Napkin math (128,256 ids, one 2-core VM Xeon, SSE2 build): glibc's exp is ~5 ns, so the
// exact total costs up to ~0.7 ms (less when most weights are too small to change the sum);
// scores and chunk maxima ~0.08 ms; the estimate ~0.19 ms (less when most chunks score below
// max - 40); a band pass <= 0.1 ms; then ~5 ns per visited id for its exp.

constexpr size_t kChunk = 16;
constexpr size_t kBlock = 1024;  // ids per buffer of estimated weights in approx_total
static_assert(kBlock % kChunk == 0);
constexpr double kLn2 = 0.69314718055994530942;

// Per-thread buffers, so that draws on a pool allocate nothing per call.
struct Scratch {
  std::vector<float> scores;     // [vocab] logits / temperature
  std::vector<float> chunk_max;  // [ceil(vocab / kChunk)] max score of each kChunk ids
  std::vector<uint64_t> keys;    // [vocab] one band's ids as rank << 32 | id
  std::vector<uint64_t> tmp;     // [vocab] radix scatter target
};

struct ScoredRow {
  std::span<const float> scores;
  std::span<const float> chunk_max;
  float max_score = 0;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// A signed integer with the order of the floats (-0 below +0; NaN never gets here), so that
// the chunk maxima vectorize.
int32_t ordered(float f) {
  const auto bits = std::bit_cast<int32_t>(f);
  return bits ^ ((bits >> 31) & 0x7FFFFFFF);
}
float from_ordered(int32_t o) { return std::bit_cast<float>(o ^ ((o >> 31) & 0x7FFFFFFF)); }

// Scores and chunk maxima; nullopt for NaN logits or an infinite max score, which the general
// path handles.
std::optional<ScoredRow> score_row(std::span<const float> logits, float temperature, Scratch& scratch) {
  const size_t n = logits.size();
  scratch.scores.resize(n);
  float* s = scratch.scores.data();
  uint32_t nan = 0;
  for (size_t i = 0; i < n; ++i) {
    s[i] = logits[i] / temperature;
    nan |= static_cast<uint32_t>((std::bit_cast<uint32_t>(logits[i]) & 0x7FFFFFFFu) > 0x7F800000u);
  }
  if (nan != 0) return std::nullopt;

  const size_t chunks = (n + kChunk - 1) / kChunk;
  scratch.chunk_max.resize(chunks);
  int32_t max_score = INT32_MIN;
  for (size_t c = 0; c < chunks; ++c) {
    int32_t m = INT32_MIN;
    for (size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) m = std::max(m, ordered(s[i]));
    scratch.chunk_max[c] = from_ordered(m);
    max_score = std::max(max_score, m);
  }
  if (!std::isfinite(from_ordered(max_score))) return std::nullopt;
  return ScoredRow{scratch.scores, scratch.chunk_max, from_ordered(max_score)};
}

// Largest float <= max_score + log(total) - 54 ln 2 - 2. A score below it has weight
// exp(score - max) < total * 2^-54 / e^2 < half an ulp of any running sum >= total, so
// adding that weight rounds back to the sum. The margin of 2 covers the rounding of exp, log
// and of this threshold (when it is off by more, |max| > 2^50 and every lower float score
// has weight 0).
float skip_below(double max_score, double total) {
  const double t = max_score + std::log(total) - 54.0 * kLn2 - 2.0;
  float f = static_cast<float>(t);
  if (static_cast<double>(f) > t) f = std::nextafter(f, -INFINITY);
  return f;
}

// The general path's total, bit for bit: sum of exp(score - max) in id order, leaving out
// the weights that cannot change the running sum (see skip_below).
double exact_total(const ScoredRow& row) {
  // Skipping starts once the sum is a normal number far from underflow.
  constexpr double kMinSkipTotal = 1e-250;
  const float* s = row.scores.data();
  const size_t n = row.scores.size();
  const auto max_score = static_cast<double>(row.max_score);
  double total = 0.0, skip_total = 0.0;
  float skip = -INFINITY;
  for (size_t c = 0; c < row.chunk_max.size(); ++c) {
    if (row.chunk_max[c] < skip) continue;
    for (size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
      if (s[i] < skip) continue;
      total += std::exp(static_cast<double>(s[i]) - max_score);
    }
    if (total >= 2.0 * skip_total && total >= kMinSkipTotal) {
      skip_total = total;
      skip = skip_below(max_score, skip_total);
    }
  }
  return total;
}

// e^(hi + lo) for hi <= 0 and |lo| <= ulp(hi) / 2, in float arithmetic that the compiler
// vectorizes: 2^k * Taylor(6) of r = hi - k ln 2 + lo, |r| <= ln 2 / 2. hi below -87 (or
// -inf) counts as -87 (clamped on the bits: a float compare would keep the loop scalar).
// Relative error <= 2.7e-7 for every float hi in [-87, 0] with lo in {0, +-ulp/2, 0.37 ulp/2}
// (checked exhaustively against std::exp in double).
float approx_exp(float hi, float lo) {
  constexpr uint32_t kNeg87 = 0xC2AE0000u;  // -87.0f
  const uint32_t bits = std::bit_cast<uint32_t>(hi);
  const uint32_t clamp = bits > kNeg87 ? ~0u : 0u;
  hi = std::bit_cast<float>((bits & ~clamp) | (kNeg87 & clamp));
  lo = std::bit_cast<float>(std::bit_cast<uint32_t>(lo) & ~clamp);
  const float kf = (hi * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest via 1.5 * 2^23
  const float r = ((hi - kf * 0.693145752f) - kf * 1.42860677e-6f) + lo;  // ln 2 in two parts
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  return p * std::bit_cast<float>((static_cast<int32_t>(kf) + 127) << 23);
}

// |approx_total - exact_total| <= kApproxRel * exact_total. score - max is split exactly
// into hi + lo (TwoSum), so each term is within 2.7e-7 of its exact weight, or is a clamped
// term <= e^-86; chunks scoring below max - 40 are left out (each weight < e^-40, at most
// 2^31 e^-40 < 1e-8 in all); the total is >= 1 (the max scores exp(0)); the exact total's
// own rounding is <= vocab * 2^-53 (1.4e-11 at 128K ids). About 3e-7 in all: kApproxRel
// leaves a margin of 10 for any vocabulary up to a million ids.
constexpr double kApproxRel = 4e-6;

double approx_total(const ScoredRow& row) {
  constexpr size_t kLanes = 8;
  const float* s = row.scores.data();
  const size_t n = row.scores.size();
  const float m = row.max_score;
  float cutoff = m - 40.0f;
  if (static_cast<double>(cutoff) > static_cast<double>(m) - 40.0) cutoff = std::nextafter(cutoff, -INFINITY);
  const auto weight = [m](float x) {
    const float hi = x - m;
    const float bv = hi - x, av = hi - bv, lo = (x - av) + (-m - bv);  // TwoSum: hi + lo == x - m
    return approx_exp(hi, lo);
  };
  float w[kBlock];
  double total = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    for (size_t c = 0; c < len; c += kChunk) {
      if (row.chunk_max[(b + c) / kChunk] < cutoff) {
        std::fill(w + c, w + std::min(len, c + kChunk), 0.0f);
      } else if (c + kChunk <= len) {
        for (size_t j = 0; j < kChunk; ++j) w[c + j] = weight(s[b + c + j]);
      } else {
        for (size_t j = c; j < len; ++j) w[j] = weight(s[b + j]);
      }
    }
    double lane[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(w[i + j]);
    }
    for (; i < len; ++i) lane[0] += static_cast<double>(w[i]);
    for (double x : lane) total += x;
  }
  return total;
}

// Sort keys: ascending key = descending score, then ascending id. -0 ranks as +0 (they
// compare equal as floats).
uint32_t rank_of(float score) {
  const uint32_t bits = std::bit_cast<uint32_t>(score + 0.0f);
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return ~ascending;
}

float score_of_rank(uint32_t rank) {
  const uint32_t ascending = ~rank;
  return std::bit_cast<float>((ascending & 0x80000000u) != 0 ? ascending & 0x7FFFFFFFu : ~ascending);
}

// Visits keys [first, last) in ascending order until visit(id, score) returns true (then
// returns true). MSD radix on the rank: keys are scattered stably into `tmp` by the top bits
// of rank - min rank and visited bucket by bucket, so buckets after the stop are never sorted.
template <class Visit>
bool visit_sorted(uint64_t* first, uint64_t* last, uint64_t* tmp, Visit& visit) {
  constexpr std::ptrdiff_t kSortDirect = 128;
  constexpr int kRadixBits = 8;
  uint32_t lo = UINT32_MAX, hi = 0;
  if (last - first > kSortDirect) {
    for (const uint64_t* k = first; k != last; ++k) {
      lo = std::min(lo, static_cast<uint32_t>(*k >> 32));
      hi = std::max(hi, static_cast<uint32_t>(*k >> 32));
    }
  }
  if (lo >= hi) {  // small, or one score throughout
    std::sort(first, last);
    for (const uint64_t* k = first; k != last; ++k) {
      if (visit(static_cast<int32_t>(static_cast<uint32_t>(*k)), score_of_rank(static_cast<uint32_t>(*k >> 32)))) {
        return true;
      }
    }
    return false;
  }
  const int shift = std::max(static_cast<int>(std::bit_width(hi - lo)) - kRadixBits, 0);
  std::array<uint32_t, (1 << kRadixBits) + 1> start{};
  for (const uint64_t* k = first; k != last; ++k) ++start[((static_cast<uint32_t>(*k >> 32) - lo) >> shift) + 1];
  for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
  std::array<uint32_t, 1 << kRadixBits> next;
  std::copy(start.begin(), start.end() - 1, next.begin());
  for (const uint64_t* k = first; k != last; ++k) tmp[next[(static_cast<uint32_t>(*k >> 32) - lo) >> shift]++] = *k;
  for (size_t b = 0; b + 1 < start.size(); ++b) {
    if (visit_sorted(tmp + start[b], tmp + start[b + 1], first + start[b], visit)) return true;
  }
  return false;
}

// Calls visit(id, score) in the general path's order (descending score, lower id first)
// until it returns true; returns false when every id was visited. Band b holds the scores in
// [max + lo_b, max + lo_{b-1}), lo_0 = min(log(total / 16), 0), the step ln 16 doubling
// after each band (about ten passes reach -1000, where every weight is 0); ids outside the
// bands so far all score lower than every id inside, so the visits form a prefix of the
// full order whatever the thresholds.
template <class Visit>
bool walk_descending(const ScoredRow& row, double total, Scratch& scratch, Visit&& visit) {
  const size_t n = row.scores.size();
  const float* s = row.scores.data();
  const auto max_score = static_cast<double>(row.max_score);
  scratch.keys.resize(n);
  scratch.tmp.resize(n);
  uint64_t* keys = scratch.keys.data();
  double lo_d = std::min(std::log(total) - 4.0 * kLn2, 0.0);
  double step_d = 4.0 * kLn2;
  float hi = INFINITY;
  size_t visited = 0;
  for (;;) {
    // Below -1000 every weight is exp(-1000) = 0: take the rest at once.
    float lo = lo_d < -1000.0 ? -INFINITY : static_cast<float>(max_score + lo_d);
    if (!(lo < hi)) lo = std::nextafter(hi, -INFINITY);
    if (static_cast<double>(lo) - max_score < -1000.0) lo = -INFINITY;
    // lo <= score < hi <=> rank_of(hi) < rank <= rank_of(lo); one unsigned compare, no branch.
    const uint32_t first_rank = rank_of(hi) + 1, rank_span = rank_of(lo) - first_rank;
    size_t count = 0;
    for (size_t c = 0; c < row.chunk_max.size(); ++c) {
      if (row.chunk_max[c] < lo) continue;
      for (size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        const uint32_t rank = rank_of(s[i]);
        keys[count] = uint64_t{rank} << 32 | static_cast<uint32_t>(i);
        count += static_cast<size_t>(rank - first_rank <= rank_span);
      }
    }
    if (visit_sorted(keys, keys + count, scratch.tmp.data(), visit)) return true;
    visited += count;
    if (visited == n) return false;
    hi = lo;
    lo_d -= step_d;
    step_d *= 2.0;
  }
}

// candidate_set without top-k, for a row score_row accepted.
std::vector<Candidate> candidate_set_fast(const ScoredRow& row, float top_p, Scratch& scratch) {
  const auto max_score = static_cast<double>(row.max_score);
  std::vector<Candidate> out;
  std::vector<double> weight;  // [kept] exp(score - max) of out[i]
  double total = 0.0;
  if (top_p >= 1.0f) {
    total = exact_total(row);
    out.reserve(row.scores.size());
    weight.reserve(row.scores.size());
    walk_descending(row, total, scratch, [&](int32_t id, float score) {
      out.push_back(Candidate{id, 0.0f});
      weight.push_back(std::exp(static_cast<double>(score) - max_score));
      return false;
    });
  } else {
    // Keep the shortest prefix whose mass reaches keep_mass = top_p * total (see
    // candidate_set_general), deciding each comparison from the estimate when it can.
    const double estimate = approx_total(row);
    double keep_lo = static_cast<double>(top_p) * estimate * (1.0 - 2.0 * kApproxRel);
    double keep_hi = static_cast<double>(top_p) * estimate * (1.0 + 2.0 * kApproxRel);
    double above = 0.0;
    walk_descending(row, estimate, scratch, [&](int32_t id, float score) {
      const double w = std::exp(static_cast<double>(score) - max_score);
      out.push_back(Candidate{id, 0.0f});
      weight.push_back(w);
      above += w;
      if (above < keep_hi && above >= keep_lo) keep_lo = keep_hi = static_cast<double>(top_p) * exact_total(row);
      return above >= keep_hi;
    });
    total = above;
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].prob = static_cast<float>(weight[i] / total);
  return out;
}

}  // namespace

std::vector<Candidate> candidate_set(std::span<const float> logits, const SamplingParams& params) {
  if (logits.empty()) return {};
  if (params.temperature == 0.0f) return {Candidate{argmax(logits), 1.0f}};
  if (params.top_k <= 0 || static_cast<size_t>(params.top_k) >= logits.size()) {
    Scratch& scratch = thread_scratch();
    if (const std::optional<ScoredRow> row = score_row(logits, params.temperature, scratch)) {
      return candidate_set_fast(*row, params.top_p, scratch);
    }
  }
  return candidate_set_general(logits, params);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sample_index,
                     uint64_t step) {
  if (params.temperature == 0.0f) return argmax(logits);
  const double u = uniform01(params.seed, sample_index, step);
  if (!logits.empty() && params.top_p >= 1.0f &&
      (params.top_k <= 0 || static_cast<size_t>(params.top_k) >= logits.size())) {
    // Every id is kept: walk the order only as far as the draw needs.
    Scratch& scratch = thread_scratch();
    if (const std::optional<ScoredRow> row = score_row(logits, params.temperature, scratch)) {
      const double total = exact_total(*row);
      const auto max_score = static_cast<double>(row->max_score);
      double cum = 0.0;
      int32_t last = 0;
      walk_descending(*row, total, scratch, [&](int32_t id, float score) {
        last = id;
        cum += static_cast<float>(std::exp(static_cast<double>(score) - max_score) / total);
        return u < cum;
      });
      return last;
    }
  }
  const std::vector<Candidate> cands = candidate_set(logits, params);
  if (cands.empty()) return 0;
  double cum = 0.0;
  for (const Candidate& c : cands) {
    cum += c.prob;
    if (u < cum) return c.id;
  }
  return cands.back().id;
}

}  // namespace kernelllm
