// Timing statistics for the verifier: median and interquartile range from raw per-call times
// (never the mean: one preempted call must not move the answer), and the noise-aware choice
// among finalists re-timed side by side.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kernelllm::harness {

struct TimingStats {
  size_t n = 0;
  double median_ms = 0;
  double q1_ms = 0;  // 25th percentile (linear interpolation between order statistics)
  double q3_ms = 0;  // 75th percentile
  double min_ms = 0;
  double iqr_ms() const { return q3_ms - q1_ms; }
};

// Stats of `times_ms` (any order; empty → n == 0).
TimingStats timing_stats(std::vector<double> times_ms);

struct Finalist {
  std::vector<double> times_ms;  // from the interleaved re-timing
  size_t source_bytes = 0;       // simplicity: shorter wins a tie
};

struct Selection {
  size_t index = 0;     // into the finalists
  bool by_speed = false;  // true: beyond noise faster than every other; false: tie → simplest
  std::string reason;
};

// Picks the finalist with the best median when its [q1, q3] lies entirely below every other
// finalist's q1 (beyond noise); otherwise, among those whose interval overlaps the best one's,
// the one with the shortest source. Expects at least one finalist.
Selection select_finalist(const std::vector<Finalist>& finalists);

}  // namespace kernelllm::harness
