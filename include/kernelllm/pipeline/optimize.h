// The optimize loop: a PyTorch module → prompt → k samples in one batch → extract ModelNew →
// verify all in parallel → the fastest correct one (noise-aware re-timing in the verifier) →
// written out with a report. Optional refinement rounds feed each failure back to the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/tokenizer.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm {

// Where completions come from: the engine (any backend) or, in tests, fixed texts.
class CompletionSource {
 public:
  virtual ~CompletionSource() = default;
  // `n` completions of `prompt` (raw text, BOS handling as the engine's generate of text).
  virtual Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                                    const SamplingParams& sampling, const StreamCallback& on_text,
                                                    GenerateStats* stats) = 0;
  // For reports: "cpu:/path/model", "cuda:random llama-3.1-8b", "fixed".
  virtual std::string describe() const = 0;
  // As complete(), and on_done(i, text) once for each completion as soon as it is whole: the
  // engine's while the others still decode (so that it can be verified meanwhile); by default
  // each after complete() returns. Not for completions a cancel cut short.
  using CompletionDone = std::function<void(int sample, const std::string& text)>;
  virtual Result<std::vector<std::string>> complete_each(const std::string& prompt, int n, int max_new_tokens,
                                                         const SamplingParams& sampling, const StreamCallback& on_text,
                                                         const CompletionDone& on_done, GenerateStats* stats) {
    auto texts = complete(prompt, n, max_new_tokens, sampling, on_text, stats);
    if (texts.ok() && on_done) {
      for (size_t i = 0; i < texts->size(); ++i) on_done(static_cast<int>(i), (*texts)[i]);
    }
    return texts;
  }
};

// An opened model ready to generate: the model directory's weights and tokenizer on "cpu" or
// "cuda" (an error naming the cause when this build or machine has no CUDA), or random weights
// of a named shape (`random_config`, e.g. "llama-3.1-8b", made on the device, seeded) with the
// tokenizer taken from `model` (a directory holding tokenizer.json; config/weights ignored).
struct EngineOptions {
  std::string model;          // directory or HF id in the local cache
  std::string device = "cpu"; // cpu | cuda
  int threads = 0;            // CPU backend threads; 0: all cores
  std::string random_config;  // empty: real weights
  uint64_t random_seed = 0;
  std::string dtype = "bf16";  // CUDA: bf16 | fp16
  // CUDA: the most of the GPU's memory the engine may hold (weights + KV cache), in (0, 1];
  // 0 → all free memory but a small reserve. See engine_memory_fraction().
  double gpu_memory_fraction = 0.0;
};
Result<std::unique_ptr<CompletionSource>> open_engine(const EngineOptions& options);

// The same opened model as parts, for callers that drive the backend themselves (the server's
// Scheduler). Members are destroyed in reverse order: the backend before what it reads.
struct OpenedEngine {
  std::shared_ptr<void> storage;         // weights (read in place) and any temporary checkpoint
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::vector<int32_t> stop_ids;         // generation_config.json's eos ids, else config.json's
  std::string description;               // as CompletionSource::describe()
};
Result<OpenedEngine> open_engine_parts(const EngineOptions& options);

// The engine's GPU memory fraction for a run that generates on `engine_device` and verifies on
// `verify_devices`: `requested` when the user gave one (> 0); else kSharedGpuMemoryFraction when
// verification uses the engine's GPU (its judge and candidate processes need memory there too),
// else 0 (all free memory).
inline constexpr double kSharedGpuMemoryFraction = 0.5;
double engine_memory_fraction(const std::string& engine_device, const std::vector<std::string>& verify_devices,
                              double requested);

// A non-owning source over a backend and tokenizer someone else keeps alive (the Python
// binding's Engine). Stops at `stop_ids`; `description` is what describe() returns.
std::unique_ptr<CompletionSource> make_engine_source(Backend& backend, const Tokenizer& tokenizer,
                                                     std::vector<int32_t> stop_ids, std::string description);

struct OptimizeOptions {
  int k = 10;
  int max_new_tokens = 2048;
  SamplingParams sampling;  // seed included; the CLI starts from kKernelLLMTemperature / kKernelLLMTopP
  int rounds = 1;           // > 1: failing candidates' errors go back to the model (one sample each)
  std::string prompt_template;    // template text with one "{}" (load_prompt_template)
  std::filesystem::path work_dir;  // problem copy, completions, candidates, report (created)
  harness::VerifyOptions verify;
  // Each sample verified as soon as the engine has written it, while it writes the others (a
  // source that returns all at once hands them over then). Off: every sample is written first.
  bool verify_while_generating = true;
  // The GPU the engine writes on ("cuda:N"; empty: none, or another machine): its engine lock is
  // held while the engine writes (harness::GpuShare), so that no candidate is timed beside the
  // engine while correctness runs go on.
  std::string generation_gpu;
};

enum class OptimizeEventKind { generating, generated, candidate_verified, round_done };

struct OptimizeEvent {
  OptimizeEventKind kind;
  int round = 0;
  int64_t tokens = 0;         // generating/generated: tokens so far (all samples)
  double tokens_per_s = 0;    // generating/generated
  int verified = 0;           // candidate_verified/round_done: how many so far this round
  int total = 0;              // candidates this round
  std::string line;           // candidate_verified: "sample 3: wrong_output (max rel err 0.4)"
  std::optional<double> best_speedup;  // best correct so far (meaningful timing only)
  bool any_correct = false;
};
using OptimizeProgress = std::function<void(const OptimizeEvent&)>;

struct OptimizeCandidate {
  int round = 0;
  int sample = 0;
  std::string completion;  // raw model text
  std::string code;        // extracted
  std::string extraction;  // ExtractedCode::how
  bool defines_model_new = false;  // ExtractedCode::defines_model_new
  std::filesystem::path file;             // work_dir/round<r>/sample<i>.py (the verified module)
  std::filesystem::path completion_file;  // work_dir/round<r>/sample<i>.completion.txt (raw text)
  // Round > 1: the sample refines round r-1's candidate with the same sample index; its prompt
  // is in work_dir/round<r>/sample<i>.prompt.txt.
  harness::CandidateResult result;
};

struct OptimizeResult {
  std::filesystem::path problem_file;  // the module as verified (work_dir/problem.py)
  std::filesystem::path prompt_file;   // the first round's prompt (work_dir/prompt.txt)
  int rounds_run = 0;
  std::vector<OptimizeCandidate> candidates;
  std::optional<size_t> best;  // index into candidates
  std::string selection_reason;
  std::string source;          // CompletionSource::describe()
  GenerateStats generation;    // summed over rounds
  double generate_ms = 0;
  double verify_ms = 0;  // from the candidates' hand-over to the verifier to its report
  // The verifier's set-up (judges, the problem, workers started ahead) runs while a round's
  // candidates are generated (harness::VerifySession): its time, and the part of it that ran
  // during generation, summed over rounds.
  double verify_setup_ms = 0;
  double verify_setup_overlap_ms = 0;
  // Verification beside generation: from the first candidate handed over to the end of its
  // round's generation, summed over rounds (0 when nothing was handed over early).
  double verify_while_generating_ms = 0;
  // Each round's verifier timeline (VerifyReport::timeline_ms: set-up steps, candidates, total),
  // in ms from that round's set-up start.
  Json verify_timelines_ms = Json::array();
  // Judge processes the rounds' verify calls started, and those they took from an earlier call
  // (a round before, or the REPL's module before) instead: summed over rounds.
  int verify_judges_started = 0, verify_judges_reused = 0;
  std::string sandbox;
  Json environment;
  std::optional<harness::TimingResult> reference_timing;
  // Why nothing is correct, one line per candidate (empty when something is).
  std::vector<std::string> failure_reasons;
  Json to_json() const;
};

// The checks optimize() makes before it runs anything (callers may make them before loading a
// model): a top-level `class Model` and `def get_inputs` in the module, k >= 1, rounds >= 1,
// max_new_tokens >= 1, a work_dir, valid sampling. invalid_argument errors.
Status validate_optimize_input(std::string_view module_code, const OptimizeOptions& options);

// `module_code` is the user's KernelBench-style module (Model, get_inputs, get_init_inputs);
// one without a top-level `class Model` or `def get_inputs`, k < 1, rounds < 1 or an empty
// work_dir is an invalid_argument error before anything runs. An empty prompt_template means the
// built-in one. Candidates are sampled with options.sampling (round r > 1, sample i: its seed
// mixed with r and i). Verification forces selection on. `progress` is called from this thread
// while generating and from a verifier thread (serialized) while verifying. Errors: the source
// failed, a file could not be written, or the verifier could not run (infrastructure); files
// written so far stay in work_dir.
Result<OptimizeResult> optimize(std::string_view module_code, CompletionSource& source, const OptimizeOptions& options,
                                const OptimizeProgress& progress = {});

}  // namespace kernelllm
