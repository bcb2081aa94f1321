// Eval reports: the JSON document (deterministic: same outcomes → same bytes; no timestamps or
// durations) and a self-contained HTML page made from it (inline CSS and SVG, no scripts from
// elsewhere): pass@k curve, speedup histogram, per-problem table, each candidate's code and verdict.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/eval/metrics.h"
#include "kernelllm/eval/outcome.h"

namespace kernelllm::eval {

struct ReportInput {
  Json run;  // run facts: model, k, sampling, devices, problems dir, levels, versions, GPU (no times)
  std::vector<ProblemOutcome> outcomes;
  std::vector<std::string> profiles = {"strict", "kernelbench"};
  MetricsOptions metrics;
};

// {"run": ..., "profiles": {name: ProfileMetrics::to_json()}, "problems": [{id, level,
//   problem_file, samples: {profile: [SampleOutcome as JSON]}}]}
Result<Json> build_report(const ReportInput& input);

// The HTML page for a report from build_report. `run_dir` is where candidate files (the
// samples' candidate_file) are read from to embed their code; an unreadable file is shown as such.
Result<std::string> render_html(const Json& report, const std::filesystem::path& run_dir);

// Writes report.json and report.html into `out_dir`.
Status write_reports(const Json& report, const std::filesystem::path& run_dir, const std::filesystem::path& out_dir);

}  // namespace kernelllm::eval
