// Median/IQR statistics and noise-aware selection of the best finalist.
#include "kernelllm/harness/timing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kernelllm::harness {
namespace {

double quantile(const std::vector<double>& sorted, double q) {
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

TimingStats timing_stats(std::vector<double> times_ms) {
  TimingStats s;
  if (times_ms.empty()) return s;
  std::sort(times_ms.begin(), times_ms.end());
  s.n = times_ms.size();
  s.median_ms = quantile(times_ms, 0.5);
  s.q1_ms = quantile(times_ms, 0.25);
  s.q3_ms = quantile(times_ms, 0.75);
  s.min_ms = times_ms.front();
  return s;
}

Selection select_finalist(const std::vector<Finalist>& finalists) {
  Selection sel;
  if (finalists.empty()) return sel;
  std::vector<TimingStats> st;
  for (const Finalist& f : finalists) st.push_back(timing_stats(f.times_ms));
  size_t best = 0;
  for (size_t i = 1; i < st.size(); ++i) {
    if (st[i].median_ms < st[best].median_ms) best = i;
  }
  bool beyond_noise = true;
  std::vector<size_t> tied{best};
  for (size_t i = 0; i < st.size(); ++i) {
    if (i == best) continue;
    if (st[best].q3_ms >= st[i].q1_ms) {
      beyond_noise = false;
      tied.push_back(i);
    }
  }
  if (beyond_noise) {
    sel.index = best;
    sel.by_speed = true;
    sel.reason = fmt::format("fastest beyond noise: median {:.4f} ms, q3 {:.4f} ms below every other q1", st[best].median_ms,
                             st[best].q3_ms);
    return sel;
  }
  size_t simplest = tied.front();
  for (size_t i : tied) {
    if (finalists[i].source_bytes < finalists[simplest].source_bytes) simplest = i;
  }
  sel.index = simplest;
  sel.reason = fmt::format("{} finalists within noise of the best median {:.4f} ms: picked the shortest source ({} bytes)",
                           tied.size(), st[best].median_ms, finalists[simplest].source_bytes);
  return sel;
}

}  // namespace kernelllm::harness
