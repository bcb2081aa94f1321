// `kernelllm eval merge`: shard stores → one store. Configs must agree apart from the shard;
// a problem may appear in several shards only when every copy is identical (same file, same
// sample hashes, same verdicts). Candidate files are copied through the output store.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/eval/run_store.h"

namespace kernelllm::eval {
namespace fs = std::filesystem;
namespace {

struct ProblemCopy {
  Problem problem;
  size_t input = 0;  // which input store holds it first
  std::vector<StoredSample> samples;
  std::vector<StoredVerdict> verdicts;
};

// Verdicts compared on what the report reads (the evidence JSON holds per-run timings).
bool same_verdicts(const std::vector<StoredVerdict>& a, const std::vector<StoredVerdict>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sample != b[i].sample || a[i].profile != b[i].profile || a[i].verdict != b[i].verdict ||
        a[i].rule != b[i].rule || a[i].message != b[i].message || a[i].speedup != b[i].speedup) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status merge_run_stores(const std::vector<fs::path>& inputs, const fs::path& out_dir) {
  if (inputs.empty()) return error(ErrorCode::invalid_argument, "eval merge: expected at least one run directory");
  std::error_code ec;
  if (fs::exists(out_dir / "run.sqlite", ec)) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("eval merge: {} already holds a run store; merge into a new directory", out_dir.string()));
  }
  std::vector<RunStore> stores;
  for (const fs::path& in : inputs) {
    if (fs::exists(in, ec) && fs::exists(out_dir, ec) && fs::equivalent(in, out_dir, ec)) {
      return error(ErrorCode::invalid_argument, fmt::format("eval merge: the output {} is also an input", out_dir.string()));
    }
    KLLM_ASSIGN_OR_RETURN(RunStore s, RunStore::open_existing(in));
    if (!stores.empty()) {
      std::vector<std::string> free_keys = kRunConfigFreeKeys;
      free_keys.push_back("shard");
      if (auto diff = config_difference(stores.front().config(), s.config(), free_keys)) {
        return error(ErrorCode::invalid_argument, fmt::format("eval merge: {} and {} were run with different options ({})",
                                                              inputs.front().string(), in.string(), *diff));
      }
    }
    stores.push_back(std::move(s));
  }

  std::map<std::string, ProblemCopy> by_id;
  for (size_t i = 0; i < stores.size(); ++i) {
    KLLM_ASSIGN_OR_RETURN(std::vector<Problem> problems, stores[i].problems());
    for (const Problem& p : problems) {
      ProblemCopy copy{p, i, {}, {}};
      KLLM_ASSIGN_OR_RETURN(copy.samples, stores[i].samples(p.id));
      KLLM_ASSIGN_OR_RETURN(copy.verdicts, stores[i].verdicts(p.id));
      auto [slot, inserted] = by_id.emplace(p.id, copy);
      if (inserted) continue;
      const ProblemCopy& first = slot->second;
      std::string where = fmt::format("problem {} is in both {} and {}", p.id, inputs[first.input].string(), inputs[i].string());
      if (first.problem.file != p.file || first.problem.position != p.position || first.problem.level != p.level) {
        return error(ErrorCode::invalid_argument, fmt::format("eval merge: {} with different problem files or positions", where));
      }
      if (first.samples.size() != copy.samples.size()) {
        return error(ErrorCode::invalid_argument, fmt::format("eval merge: {} with {} and {} samples", where,
                                                              first.samples.size(), copy.samples.size()));
      }
      for (size_t j = 0; j < copy.samples.size(); ++j) {
        if (first.samples[j].sha256 != copy.samples[j].sha256) {
          return error(ErrorCode::invalid_argument, fmt::format("eval merge: {} and sample {} differs", where, j));
        }
      }
      if (!same_verdicts(first.verdicts, copy.verdicts)) {
        return error(ErrorCode::invalid_argument, fmt::format("eval merge: {} with different verdicts", where));
      }
    }
  }

  Json config = stores.front().config();
  config["shard"] = "0/1";
  KLLM_ASSIGN_OR_RETURN(RunStore out, RunStore::open_or_create(out_dir, config));
  std::vector<ProblemCopy> ordered;
  for (auto& [id, copy] : by_id) ordered.push_back(copy);
  std::sort(ordered.begin(), ordered.end(), [](const ProblemCopy& a, const ProblemCopy& b) {
    return a.problem.position != b.problem.position ? a.problem.position < b.problem.position : a.problem.id < b.problem.id;
  });
  std::vector<Problem> problems;
  for (const ProblemCopy& c : ordered) problems.push_back(c.problem);
  KLLM_RETURN_IF_ERROR(out.set_problems(problems));
  for (const ProblemCopy& c : ordered) {
    const RunStore& src = stores[c.input];
    std::vector<NewSample> samples;
    for (const StoredSample& s : c.samples) {
      NewSample ns;
      KLLM_ASSIGN_OR_RETURN(ns.code, read_text_file(src.dir() / s.candidate_file));
      if (!s.completion_file.empty()) {
        KLLM_ASSIGN_OR_RETURN(ns.completion, read_text_file(src.dir() / s.completion_file));
      }
      ns.origin = s.origin;
      ns.extraction = s.extraction;
      samples.push_back(std::move(ns));
    }
    if (!samples.empty()) KLLM_RETURN_IF_ERROR(out.add_samples(c.problem, samples));
    for (const StoredVerdict& v : c.verdicts) KLLM_RETURN_IF_ERROR(out.put_verdict(v, std::nullopt));
  }
  for (const RunStore& s : stores) {
    KLLM_ASSIGN_OR_RETURN(std::vector<VerificationRow> rows, s.verifications());
    KLLM_RETURN_IF_ERROR(out.add_verification_rows(rows));
  }
  return {};
}

}  // namespace kernelllm::eval
