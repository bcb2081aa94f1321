// `kernelllm eval` as a library: score a model (or pre-generated candidates) on a problem set
// with pass@k and fast_p under each verifier profile. The run lives in a resumable store
// (run_store.h): a restart with the same options redoes nothing that was committed.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/eval/metrics.h"
#include "kernelllm/eval/problems.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/endpoint.h"
#include "kernelllm/pipeline/optimize.h"

namespace kernelllm::eval {

struct EvalTick;

struct EvalOptions {
  std::filesystem::path problems;          // KernelBench root or plain directory
  std::optional<std::vector<int>> levels;  // KernelBench root only; unset: {1}
  std::filesystem::path out;               // the run directory
  Shard shard;

  // Pre-generated candidates (DIR/<stem>/<sample>.py); empty: generate with the model.
  std::filesystem::path candidates;

  // Generation (when `candidates` is empty).
  std::string model;                          // model directory (also where kernelllm.py's template is read)
  std::string gen_device = "cpu";             // the engine's device
  int k = 20;                                 // samples per problem
  int max_new_tokens = 2048;
  SamplingParams sampling;                    // seed included; one seed for every problem
  std::filesystem::path prompt_template_file; // empty: the model's kernelllm.py, else built-in
  // Generation through an OpenAI-compatible endpoint instead of `model` (its model name filled in):
  // the run records its url, model and prompt form; the template is endpoint_prompt_template().
  std::optional<EndpointOptions> endpoint;

  std::vector<std::string> profiles = {"strict", "kernelbench"};
  // Problems verified at once (with `candidates` or `endpoint`; a local model keeps 1); 0: chosen
  // by eval_concurrency. Not part of the run's config: a run resumed with another value gives the
  // same report.
  int problem_jobs = 0;
  // The multi-shape check of each correct sample (size globals x0.5 and x0.5 made odd), reported
  // in its result beside the verdict; part of the run's config when on.
  bool multishape = false;
  // Devices, jobs, sandbox, trials, timing... `profile`, `cache_path`, `select`, `multishape` and
  // `on_result` are set per call by run_eval (no selection: a verdict, with its multi-shape
  // result, is final when on_result reports it).
  harness::VerifyOptions verify;
  MetricsOptions metrics;
  std::function<void(const std::string&)> progress;  // one line per event (may be empty)
  std::function<void(const EvalTick&)> on_tick;  // where the run is, for meters (may be empty)
};

// The run's position, reported as each problem starts a phase, as generated text arrives and as
// each verdict is committed; a meter throttles and prints it.
struct EvalTick {
  size_t problem = 0;   // problems finished before this one (0-based index of the current one)
  size_t problems = 0;  // problems in this run (this shard)
  std::string id;       // the current problem
  std::string phase;    // "generating", "verifying <profile>" or "done"
  size_t text_bytes = 0;  // generating: text received so far (all samples)
  size_t verified = 0;    // verifying: verdicts of this profile so far, of `to_verify`
  size_t to_verify = 0;
};

// Opens the completion source when some problem still needs samples (not at all on a resume
// whose samples all exist).
using SourceFactory = std::function<Result<std::unique_ptr<CompletionSource>>()>;

// What the store records and checks on restart: everything that changes samples or verdicts
// (problems root, levels, candidates dir or model (or endpoint url, model, prompt form) + k +
// sampling + prompt template, profiles,
// verifier version and options, device kind cpu/cuda) and the shard. Jobs, device indices and
// the generation device's threads are not part of it.
Result<Json> run_config(const EvalOptions& options);

// How many problems are verified at once and with how many candidate workers each, on a host of
// `cores` cores. problem_jobs 0 (not given): cores / 2 when the samples are pre-generated or come
// from an endpoint and every verify device is a GPU (the configuration the throughput records
// measure: 8 on 16 cores with one GPU, 16 on 32 with two), else 1; at most `problems`. With more
// than one at once and verify.jobs 0, each problem gets cores / problem_jobs workers (at least
// 1): 8 problems of 20 samples each no longer start 8 x 16 workers, each a CUDA context.
struct EvalConcurrency {
  int problem_jobs = 1;
  int jobs = 0;  // verify.jobs per problem (0: the verifier's own default, min(cores, candidates))
};
EvalConcurrency eval_concurrency(const EvalOptions& options, int cores, size_t problems);

// The order in which problems are taken when `problem_jobs` > 1: the most work first (`work`: each
// problem's samples, e.g. its candidate files), ties in their own order, so that the run does not
// end waiting on one long problem begun last; one at a time, their own order.
std::vector<size_t> problem_start_order(const std::vector<size_t>& work, int problem_jobs);

// Runs (or resumes) the eval and writes RUN/report.json and RUN/report.html; returns the report.
// An error when something could not be verified (not_verified: no healthy device or worker);
// what was committed stays, and a rerun retries the rest.
Result<Json> run_eval(const EvalOptions& options, const SourceFactory& open_source);

// Builds the report from a complete store and writes RUN/report.json and RUN/report.html.
// `partial`: from an incomplete one too, over the problems with every verdict; the others are
// listed under "left_out" ({"id", "why", "error": the last from RUN/problem-errors.jsonl}).
Result<Json> write_run_report(const std::filesystem::path& run_dir, const MetricsOptions& metrics, bool partial = false);

// `kernelllm eval merge`: merge_run_stores, then the merged run's report.
Result<Json> merge_runs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                        const MetricsOptions& metrics);

// A plain-text table of a report's profiles: problems, samples, correct, pass@k, fast_p,
// geomean speedup; on CPU runs a line saying timing is not meaningful.
Result<std::string> summary_table(const Json& report);

}  // namespace kernelllm::eval
