// KernelBench interop: its run directories as candidates and its eval_results.json from a run
// store. Formats as KernelBench's scripts/eval_from_generations.py writes them (runtime in ms,
// the mean of the timed calls; runtime_stats mean/std/min/max/num_trials; -1.0 and {} untimed).
#include "kernelllm/eval/kernelbench.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "kernelllm/eval/run_store.h"

namespace kernelllm::eval {
namespace fs = std::filesystem;
namespace {

// Reads a decimal number at the front of `s`, advancing it; nullopt when there is none.
std::optional<long long> take_number(std::string_view& s) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  long long v = 0;
  std::from_chars(s.data(), s.data() + digits, v);
  s.remove_prefix(digits);
  return v;
}

bool take(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return true;
}

std::optional<long long> problem_number(const Problem& p) {
  std::string_view s = p.stem;
  auto n = take_number(s);
  if (n && (s.empty() || s[0] == '_')) return n;
  return std::nullopt;
}

// KernelBench's runtime_stats from our published per-call times (ms).
Json runtime_stats(const std::vector<double>& times_ms, const std::string& device) {
  double sum = 0;
  for (double t : times_ms) sum += t;
  const double mean = sum / static_cast<double>(times_ms.size());
  double var = 0;
  for (double t : times_ms) var += (t - mean) * (t - mean);
  return {{"mean", mean},
          {"std", std::sqrt(var / static_cast<double>(times_ms.size()))},
          {"min", *std::min_element(times_ms.begin(), times_ms.end())},
          {"max", *std::max_element(times_ms.begin(), times_ms.end())},
          {"num_trials", times_ms.size()},
          {"device", device}};
}

// One eval_results.json entry. The verdict itself and its reason go into metadata, under the
// keys KernelBench uses for the same failure where it has one.
Json kernelbench_entry(const StoredVerdict& v, long long sample_id) {
  const Json& r = v.result;
  const std::string device = r.is_object() ? r.value("device", std::string()) : std::string();
  Json metadata = {{"device", device},
                   {"hardware", device},
                   {"kernelllm_profile", v.profile},
                   {"kernelllm_verdict", v.verdict},
                   {"kernelllm_rule", v.rule},
                   {"kernelllm_message", v.message}};
  if (v.verdict == "compile_error") {
    metadata["compilation_error"] = v.message;
  } else if (v.verdict == "runtime_error" || v.verdict == "crash" || v.verdict == "timeout") {
    metadata["runtime_error"] = v.message;
    metadata["runtime_error_name"] = v.verdict;
  } else if (v.verdict == "wrong_output" || v.verdict == "wrong_shape") {
    metadata["correctness_issue"] = v.message;
  }
  Json entry = {{"sample_id", sample_id},
                {"compiled", v.verdict != "compile_error"},
                {"correctness", v.verdict == "correct"},
                {"runtime", -1.0},
                {"runtime_stats", Json::object()}};
  const Json timing = r.is_object() ? r.value("timing", Json(nullptr)) : Json(nullptr);
  if (v.verdict == "correct" && timing.is_object() && timing.value("meaningful", false) && timing.contains("times_ms") &&
      timing["times_ms"].is_array() && !timing["times_ms"].empty()) {
    std::vector<double> times = timing["times_ms"].get<std::vector<double>>();
    entry["runtime_stats"] = runtime_stats(times, device);
    entry["runtime"] = entry["runtime_stats"]["mean"];
    const double median = timing.value("median_ms", 0.0);
    if (v.speedup && median > 0) {
      metadata["kernelllm_speedup"] = *v.speedup;
      metadata["kernelllm_candidate_median_ms"] = median;
      metadata["kernelllm_reference_median_ms"] = *v.speedup * median;
    }
  }
  entry["metadata"] = std::move(metadata);
  return entry;
}

}  // namespace

std::optional<KernelBenchSampleName> parse_kernelbench_sample_name(std::string_view s) {
  KernelBenchSampleName n;
  if (!take(s, "level_")) return std::nullopt;
  auto level = take_number(s);
  if (!level || *level > 1000000 || !take(s, "_problem_")) return std::nullopt;
  auto problem = take_number(s);
  if (!problem || !take(s, "_sample_")) return std::nullopt;
  auto sample = take_number(s);
  if (!sample || s != "_kernel.py") return std::nullopt;
  n.level = static_cast<int>(*level);
  n.problem = *problem;
  n.sample = *sample;
  return n;
}

bool is_kernelbench_run_dir(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (parse_kernelbench_sample_name(it->path().filename().string()) && it->is_regular_file(ec)) return true;
  }
  return false;
}

Result<std::vector<fs::path>> kernelbench_candidate_files(const fs::path& run_dir, const Problem& problem) {
  auto number = problem_number(problem);
  if (!number) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("candidates: {} is a KernelBench run directory, which names samples by problem number; "
                             "expected problem {} to be named <number>_<name>.py, found {}",
                             run_dir.string(), problem.id, problem.file.filename().string()));
  }
  std::map<long long, fs::path> by_sample;
  std::set<int> levels;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto name = parse_kernelbench_sample_name(it->path().filename().string());
    if (!name || name->problem != *number || !it->is_regular_file(ec)) continue;
    if (problem.level != 0 && name->level != problem.level) continue;
    levels.insert(name->level);
    by_sample.emplace(name->sample, fs::absolute(it->path(), ec).lexically_normal());
  }
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot list {}: {}", run_dir.string(), ec.message()));
  if (levels.size() > 1) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("candidates: {} holds samples of problem {} for levels {} and {}; expected one level "
                             "(use a KernelBench root with --levels, or one run directory per level)",
                             run_dir.string(), *number, *levels.begin(), *levels.rbegin()));
  }
  if (by_sample.empty()) {
    return error(ErrorCode::not_found,
                 fmt::format("candidates: expected files level_{}_problem_{}_sample_<K>_kernel.py in {} for problem "
                             "{}, found none",
                             problem.level != 0 ? std::to_string(problem.level) : std::string("<N>"), *number,
                             run_dir.string(), problem.id));
  }
  std::vector<fs::path> out;
  for (auto& [k, p] : by_sample) out.push_back(p);
  return out;
}

Result<std::string> kernelbench_eval_results(const fs::path& run_dir, const std::string& profile,
                                             std::optional<int> level, int* missing) {
  KLLM_ASSIGN_OR_RETURN(RunStore store, RunStore::open_existing(run_dir));
  const Json run_profiles = store.config().value("profiles", Json::array());
  if (std::find(run_profiles.begin(), run_profiles.end(), Json(profile)) == run_profiles.end()) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("export-kernelbench: --profile {}: expected one of the run's profiles {}", profile,
                             run_profiles.dump()));
  }
  KLLM_ASSIGN_OR_RETURN(std::vector<Problem> problems, store.problems());
  std::set<int> run_levels;
  for (const Problem& p : problems) run_levels.insert(p.level);
  if (!level && run_levels.size() > 1) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("export-kernelbench: the run covers levels {} to {} and KernelBench keys results by "
                             "problem number within one level; expected --level N",
                             *run_levels.begin(), *run_levels.rbegin()));
  }
  if (level && !run_levels.count(*level)) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("export-kernelbench: --level {}: the run has no problem of that level", *level));
  }
  std::map<long long, Json> by_problem;  // numeric key order, as KernelBench sorts its file
  int left_out = 0;
  for (const Problem& p : problems) {
    if (level && p.level != *level) continue;
    auto number = problem_number(p);
    if (!number) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("export-kernelbench: KernelBench keys results by problem number; expected problem {} to "
                               "be named <number>_<name>.py",
                               p.id));
    }
    if (by_problem.count(*number)) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("export-kernelbench: two problems have number {} (the second is {})", *number, p.id));
    }
    KLLM_ASSIGN_OR_RETURN(std::vector<StoredSample> samples, store.samples(p.id));
    KLLM_ASSIGN_OR_RETURN(std::vector<StoredVerdict> verdicts, store.verdicts(p.id));
    Json entries = Json::array();
    for (const StoredSample& s : samples) {
      auto v = std::find_if(verdicts.begin(), verdicts.end(),
                            [&](const StoredVerdict& x) { return x.sample == s.sample && x.profile == profile; });
      if (v == verdicts.end()) {
        ++left_out;
        continue;
      }
      // A sample copied from a KernelBench run keeps its sample number there.
      auto kb = parse_kernelbench_sample_name(fs::path(s.origin).filename().string());
      entries.push_back(kernelbench_entry(*v, kb ? kb->sample : s.sample));
    }
    by_problem[*number] = std::move(entries);
  }
  // nlohmann's objects sort keys as strings ("10" < "2"); an ordered object keeps numeric order.
  nlohmann::ordered_json ordered = nlohmann::ordered_json::object();
  for (auto& [n, entries] : by_problem) ordered[std::to_string(n)] = nlohmann::ordered_json::parse(entries.dump());
  if (missing) *missing = left_out;
  return ordered.dump(4) + "\n";
}

}  // namespace kernelllm::eval
