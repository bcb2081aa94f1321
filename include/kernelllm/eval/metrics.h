// Benchmark metrics over an eval run: unbiased pass@k (the HumanEval estimator), fast_p
// (KernelBench: correct and speedup > p), geometric-mean speedup, per-problem rows.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/eval/outcome.h"

namespace kernelllm::eval {

// 1 - C(n-c, k) / C(n, k), computed as a product (no overflow for n in the thousands).
// Requires 0 <= c <= n and 1 <= k <= n; otherwise invalid_argument.
Result<double> pass_at_k(int n, int c, int k);

struct MetricsOptions {
  std::vector<int> ks = {1, 10, 20};                       // a k above a problem's n is skipped (reported as null)
  std::vector<double> ps = {0.0, 0.5, 0.8, 1.0, 1.5, 2.0};
  // Whether the run's timing is meaningful (a GPU run). nullopt: inferred, meaningful when at least
  // one sample has a speedup. true: fast_p is reported even when no sample was correct (as zeros);
  // false: fast_p and fast_p_best are null whatever the samples say.
  std::optional<bool> timing_meaningful;
};

struct ProblemRow {
  std::string id;
  int level = 0;
  int n = 0;  // samples
  int c = 0;  // correct samples
  std::map<int, std::optional<double>> pass_at_k;  // null where k > n
  std::optional<double> best_speedup;              // over correct samples with meaningful timing
  std::map<std::string, int> verdict_counts;       // verdict name → count
};

struct ProfileMetrics {
  std::string profile;
  int problems = 0;
  int samples = 0;
  int correct = 0;
  // Mean over problems of each problem's estimate; null when some problem has n < k.
  std::map<int, std::optional<double>> pass_at_k;
  // fast_p: mean over problems of (samples correct with speedup > p) / n — KernelBench's
  // per-sample definition, averaged over a problem's samples. Null when no timing is meaningful.
  std::map<double, std::optional<double>> fast_p;
  // fast_p over the best sample of each problem (what `optimize` delivers). Null likewise.
  std::map<double, std::optional<double>> fast_p_best;
  std::optional<double> geomean_speedup;  // over correct samples with meaningful timing
  int timed_samples = 0;                  // correct samples that have a speedup
  // Correct samples with a multi-shape result, and those of them that fail it (0 and 0 without
  // the check; "multishape" in the JSON only when some sample was checked).
  int multishape_checked = 0;
  int multishape_failed = 0;
  std::vector<ProblemRow> rows;           // in the order of the outcomes
  Json to_json() const;                   // maps keyed "1", "10", "0.5"...; null for absent values
  // The inverse of to_json (for reports read back from disk); `what` names the source in errors.
  static Result<ProfileMetrics> from_json(const Json& j, std::string_view what);
};

// The JSON key of a k or p: the shortest decimal that reads back as the same number ("1", "0.5").
std::string metric_key(double value);

// Metrics of one profile. Problems without samples for `profile` count as n = 0, c = 0 and
// are an invalid_argument error (a run must be complete before it is scored).
Result<ProfileMetrics> compute_metrics(const std::vector<ProblemOutcome>& outcomes, const std::string& profile,
                                       const MetricsOptions& options = {});

}  // namespace kernelllm::eval
