// KernelBench interop for `kernelllm eval`: a KernelBench run directory (flat files
// `level_{N}_problem_{M}_sample_{K}_kernel.py`, as its generate_samples script writes them) read
// as pre-generated candidates, and a finished run written as KernelBench's `eval_results.json`
// (what its eval_from_generations script writes and benchmark_eval_analysis reads).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/eval/problems.h"

namespace kernelllm::eval {

// A parsed KernelBench sample file name.
struct KernelBenchSampleName {
  int level = 0;
  long long problem = 0;  // the number prefix of the problem file ("19" of 19_ReLU.py)
  long long sample = 0;
};
// `level_1_problem_19_sample_0_kernel.py` → {1, 19, 0}; nullopt for any other name.
std::optional<KernelBenchSampleName> parse_kernelbench_sample_name(std::string_view file_name);

// Whether `dir` directly holds at least one KernelBench sample file.
bool is_kernelbench_run_dir(const std::filesystem::path& dir);

// The samples of `problem` in a KernelBench run directory, in sample-number order: the files whose
// problem number is the problem's number prefix and whose level is the problem's (any level for a
// plain problem directory, as long as only one level matches). not_found when there is none;
// invalid_argument when the problem file has no number prefix or a plain problem matches several levels.
Result<std::vector<std::filesystem::path>> kernelbench_candidate_files(const std::filesystem::path& run_dir,
                                                                       const Problem& problem);

// The text of KernelBench's eval_results.json for `profile` from the run store in `run_dir`:
// {"<problem number>": [{"sample_id", "compiled", "correctness", "metadata", "runtime",
// "runtime_stats"}]}, keys in numeric order (as KernelBench writes it). `level` picks one level of a run over several (KernelBench keys are per
// level); required then. Samples without a verdict for `profile` are left out (*missing counts them).
Result<std::string> kernelbench_eval_results(const std::filesystem::path& run_dir, const std::string& profile,
                                             std::optional<int> level, int* missing);

}  // namespace kernelllm::eval
