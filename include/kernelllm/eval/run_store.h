// The resumable store of an eval run: RUN/run.sqlite (WAL; every write its own transaction) with
// the run's config, its problems, each problem's samples (candidate files written once under
// RUN/candidates/<problem id>/<sample>.py), each verdict per (problem, sample, profile) committed
// as soon as it is known, and a log of every verification actually asked of the verifier.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/eval/outcome.h"
#include "kernelllm/eval/problems.h"

struct sqlite3;

namespace kernelllm::eval {

inline constexpr int kRunStoreSchema = 1;

// A sample as stored. Paths are relative to the run directory.
struct StoredSample {
  int sample = 0;
  std::string candidate_file;   // "candidates/<id>/<sample>.py"
  std::string completion_file;  // "candidates/<id>/<sample>.completion.txt"; empty when not generated
  std::string origin;           // the file it was copied from, or "generated"
  std::string extraction;       // ExtractedCode::how; empty for copied files
  std::string sha256;           // of the candidate code
  bool operator==(const StoredSample&) const = default;
};

// A sample to add: its code and, when generated, the model's completion.
struct NewSample {
  std::string code;
  std::string completion;  // empty: not generated
  std::string origin;
  std::string extraction;
};

struct StoredVerdict {
  std::string problem;
  int sample = 0;
  std::string profile;
  std::string verdict;  // harness::verdict_name
  std::string rule;
  std::string message;
  std::optional<double> speedup;  // meaningful timing only
  Json result;                    // the verifier's CandidateResult JSON (paths relative to the run dir)
  bool operator==(const StoredVerdict&) const = default;
};

// One row of the verifications log: a verdict the verifier produced for this run (from its
// cache or by running the candidate), as opposed to one read back from the store.
struct VerificationRow {
  int64_t seq = 0;  // order of commit
  std::string problem;
  int sample = 0;
  std::string profile;
  std::string verdict;
  bool cached = false;  // the verifier answered from its result cache
};

// The first key whose value differs between two run configs (JSON objects), nested objects
// named with dots, as "verifier.trials: the run has 5, the options give 3"; keys (dotted names)
// in `ignore` are skipped. nullopt when equal.
std::optional<std::string> config_difference(const Json& stored, const Json& given,
                                             const std::vector<std::string>& ignore = {});

// Run config keys a restart or a shard may change: where an endpoint was reached (a server moved
// or one per shard host); its model name and prompt form are compared like everything else.
inline const std::vector<std::string> kRunConfigFreeKeys = {"endpoint.url"};

class RunStore {
 public:
  RunStore() = default;
  ~RunStore();
  RunStore(RunStore&& other) noexcept;
  RunStore& operator=(RunStore&& other) noexcept;
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // Creates `run_dir`/run.sqlite recording `config` (a JSON object), or opens an existing one
  // whose recorded config must equal `config` apart from kRunConfigFreeKeys (invalid_argument naming
  // the first differing key otherwise; the recorded config is kept). The store holds an exclusive lock on `run_dir`/run.lock while it lives: a second
  // process opening the same run this way gets invalid_argument (two writers would verify the same
  // samples twice).
  static Result<RunStore> open_or_create(const std::filesystem::path& run_dir, const Json& config);
  // Opens an existing store (report, merge); not_found when `run_dir` has none.
  static Result<RunStore> open_existing(const std::filesystem::path& run_dir);

  const std::filesystem::path& dir() const { return dir_; }
  const Json& config() const { return config_; }

  // The first call records `problems`; later calls (a restart) require the same ids, files and
  // positions, and name the first difference otherwise.
  Status set_problems(const std::vector<Problem>& problems);
  // In position order.
  Result<std::vector<Problem>> problems() const;

  // A problem's samples in index order; empty before add_samples.
  Result<std::vector<StoredSample>> samples(const std::string& problem_id) const;
  // Writes every sample's files, then commits all rows in one transaction (sample i = index i).
  // invalid_argument when the problem already has samples or is not in the store.
  Status add_samples(const Problem& problem, const std::vector<NewSample>& samples);

  // Every verdict of a problem (all profiles), by sample then profile.
  Result<std::vector<StoredVerdict>> verdicts(const std::string& problem_id) const;
  // Commits one verdict and, unless `log` is nullopt, a verifications row with cached = *log,
  // in one transaction. A second verdict for the same (problem, sample, profile) is an error.
  Status put_verdict(const StoredVerdict& verdict, std::optional<bool> log);
  Result<int64_t> verdict_count() const;

  Result<std::vector<VerificationRow>> verifications() const;
  Status add_verification_rows(const std::vector<VerificationRow>& rows);  // merge: copies another store's log

  // The outcomes of every stored problem for `profiles`, in position order. invalid_argument
  // naming the first (problem, sample, profile) without a verdict when the run is incomplete;
  // with `left_out`, such problems are left out instead and listed there ({"id", "why"}).
  Result<std::vector<ProblemOutcome>> outcomes(const std::vector<std::string>& profiles, Json* left_out = nullptr) const;

 private:
  Status exec(const char* sql) const;
  Status init_schema();
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;  // flock on run.lock (open_or_create only)
  std::filesystem::path dir_;
  Json config_;
};

// Combines shard stores into `out_dir` (which must not hold a run store yet): their configs must
// be equal apart from "shard" and kRunConfigFreeKeys (the first input's are kept); a problem in several inputs must be identical in each (same file,
// sample hashes and verdicts). Candidate files are copied; the output's "shard" is "0/1".
Status merge_run_stores(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir);

}  // namespace kernelllm::eval
