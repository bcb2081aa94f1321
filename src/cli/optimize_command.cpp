// `kernelllm optimize MODULE.py --model DIR`: k Triton candidates from the engine, verified in
// the sandbox, the fastest correct one written out. Live progress on stderr, the verdict table
// on stdout, a JSON report in the work directory. Exit 0: a correct candidate was written;
// 3: the run finished but no candidate was correct; 1: the tool failed; 2: usage errors;
// 130/143: interrupted (workers stopped, the verifier's temporary files removed).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/devices.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/endpoint_args.h"
#include "cli/hub.h"
#include "cli/table.h"
#include "kernelllm/base/device.h"
#include "kernelllm/base/file.h"
#include "kernelllm/base/run_facts.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"

namespace kernelllm::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kExitNothingCorrect = 3;

struct OptimizeArgs {
  std::string module_file;
  std::string model;
  HubOptions hub;
  int k = 10;
  float temperature = kKernelLLMTemperature;
  float top_p = kKernelLLMTopP;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
  int max_new_tokens = 2048;
  int rounds = 1;
  std::string out_file;
  std::string json_file;
  std::string work_dir;
  std::string device;         // empty: resolve_gen_device's default
  std::string verify_device;  // empty: resolve_verify_devices's default
  std::string profile = "strict";
  std::string template_file;
  std::string random_weights;
  std::string dtype = "bf16";
  int jobs = 0;
  bool no_sandbox = false;
  bool no_cache = false;
  bool verify_after_generation = false;
  std::string cache_file;
  int threads = 0;
  double gpu_memory_fraction = 0.0;
  bool verbose = false;
  EndpointArgs endpoint;
};

int fail(const Status& status) {
  std::fprintf(stderr, "kernelllm optimize: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

// Live progress on stderr: generation speed and elapsed time (rewritten in place on a terminal,
// else a line every few seconds) and one line per verified candidate with elapsed time and the
// verification's ETA.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool with_round) : tty_(isatty(STDERR_FILENO) == 1), with_round_(with_round) {}

  void operator()(const OptimizeEvent& e) {
    const std::string round = with_round_ ? fmt::format("round {}: ", e.round) : "";
    if (e.round != round_) {
      round_ = e.round;
      round_start_s_ = seconds();
      verify_start_s_ = -1;
    }
    // A "generating" line rewritten in place: "generated" takes its place, any other line (a
    // verdict while the engine still writes) goes below it.
    if (line_open_ && e.kind != OptimizeEventKind::generating) {
      std::fprintf(stderr, e.kind == OptimizeEventKind::generated ? "\r" : "\n");
      line_open_ = false;
    }
    switch (e.kind) {
      case OptimizeEventKind::generating: {
        const std::string line = fmt::format("{}generating: {} tokens, {:.1f} tok/s, elapsed {}", round, e.tokens,
                                             e.tokens_per_s, duration_text(seconds()));
        if (tty_) {
          std::fprintf(stderr, "\r%s   ", line.c_str());
          line_open_ = true;
        } else if (seconds() - last_line_s_ >= 5) {
          last_line_s_ = seconds();
          std::fprintf(stderr, "%s\n", line.c_str());
        }
        break;
      }
      case OptimizeEventKind::generated:
        if (verify_start_s_ < 0) verify_start_s_ = seconds();  // else verification began during generation
        std::fprintf(stderr, "%sgenerated %lld tokens (%.1f tok/s)\n", round.c_str(),
                     static_cast<long long>(e.tokens), e.tokens_per_s);
        break;
      case OptimizeEventKind::candidate_verified: {
        const std::string best = e.best_speedup ? fmt::format("best so far {:.2f}x", *e.best_speedup)
                                 : e.any_correct ? "correct found (timing not meaningful)"
                                                 : "none correct yet";
        // e.line names the round itself when there are several. A verdict before the round's
        // generation ended: verification began while the samples were written (the round's start
        // bounds when).
        if (verify_start_s_ < 0) verify_start_s_ = round_start_s_;
        const double verifying_s = seconds() - verify_start_s_;
        const std::string eta = e.verified >= e.total ? "" : fmt::format(", ETA {}", duration_text(verifying_s / e.verified * (e.total - e.verified)));
        std::fprintf(stderr, "verified %d/%d  %s  [%s; elapsed %s%s]\n", e.verified, e.total, e.line.c_str(), best.c_str(),
                     duration_text(seconds()).c_str(), eta.c_str());
        break;
      }
      case OptimizeEventKind::round_done:
        std::fprintf(stderr, "%s%s\n", round.c_str(), e.any_correct ? "a correct candidate was found" : "no candidate is correct");
        break;
    }
    std::fflush(stderr);
  }

 private:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  bool tty_;
  bool with_round_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_line_s_ = -1e9;
  int round_ = 0;
  double round_start_s_ = 0;   // the round's first event
  double verify_start_s_ = -1; // when the round's verification began (the end of generation, or earlier)
  bool line_open_ = false;     // a "generating" line without its newline yet
};

void print_table(const OptimizeResult& r, bool with_round, const std::string& written_to, std::FILE* out) {
  std::fprintf(out, "%s\n", r.sandbox.c_str());
  std::fprintf(out, "problem: %s  source: %s\n", r.problem_file.c_str(), r.source.c_str());
  const std::string header = fmt::format("{:<4} {:<5} {:<6} {:<18} {:<60} {:>8}", "#", "round", "sample", "verdict",
                                         "rule/message", "speedup");
  std::fprintf(out, "%s\n%s\n", header.c_str(), std::string(header.size(), '-').c_str());
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const OptimizeCandidate& c = r.candidates[i];
    const bool plain = c.result.rule.empty() || c.result.rule == harness::verdict_name(c.result.verdict);
    std::string why = plain ? c.result.message : c.result.rule + ": " + c.result.message;
    for (char& ch : why) {
      if (ch == '\n' || ch == '\t') ch = ' ';
    }
    const std::string speed = c.result.speedup > 0 ? fmt::format("{:.2f}x", c.result.speedup) : "-";
    const std::string mark = r.best && *r.best == i ? "*" : "";
    std::fprintf(out, "%s\n", fmt::format("{:<4} {:<5} {:<6} {:<18} {:<60} {:>8}", std::to_string(i) + mark, c.round, c.sample,
                                    harness::verdict_name(c.result.verdict), cell(why, 60), speed)
                            .c_str());
  }
  const double gen_s = r.generate_ms / 1000.0;
  std::fprintf(out, "generate: %.1f s, %lld tokens, %.1f tok/s; verify: %.1f s after it (set-up %.1f s, %.1f s of it during "
              "generation)\n", gen_s, static_cast<long long>(r.generation.generated_tokens),
              gen_s > 0 ? static_cast<double>(r.generation.generated_tokens) / gen_s : 0.0, r.verify_ms / 1000.0,
              r.verify_setup_ms / 1000.0, r.verify_setup_overlap_ms / 1000.0);
  if (r.best) {
    const OptimizeCandidate& b = r.candidates[*r.best];
    std::fprintf(out, "best: #%zu %s (%s)\n", *r.best, b.file.c_str(), r.selection_reason.c_str());
    std::fprintf(out, "written to %s\n", written_to.c_str());
    return;
  }
  std::fprintf(out, "no correct candidate%s:\n", with_round ? fmt::format(" after {} round(s)", r.rounds_run).c_str() : "");
  for (const std::string& line : r.failure_reasons) std::fprintf(out, "  %s\n", line.c_str());
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return error(ErrorCode::io_error, path.string() + ": cannot write");
  return {};
}

Json options_json(const OptimizeArgs& a, const OptimizeOptions& o, const std::string& template_source,
                  const std::string& device, double gpu_memory_fraction, const Json& endpoint) {
  return Json{{"module", a.module_file},
              {"endpoint", endpoint},
              {"model", a.model},
              {"revision", a.hub.revision.empty() ? Json(nullptr) : Json(a.hub.revision)},
              {"random_weights", a.random_weights},
              {"device", device},
              {"gpu_memory_fraction", gpu_memory_fraction},
              {"verify_devices", o.verify.devices},
              {"profile", o.verify.profile},
              {"verify_while_generating", o.verify_while_generating},
              {"sandbox", o.verify.sandbox},
              {"k", o.k},
              {"rounds", o.rounds},
              {"max_new_tokens", o.max_new_tokens},
              {"temperature", o.sampling.temperature},
              {"top_p", o.sampling.top_p},
              {"top_k", o.sampling.top_k},
              {"seed", o.sampling.seed},
              {"prompt_template", template_source},
              {"work_dir", o.work_dir.string()}};
}

int run_optimize(const OptimizeArgs& a) {
  if (a.model.empty() == a.endpoint.url.empty()) {
    std::fprintf(stderr, "kernelllm optimize: expected exactly one of --model and --endpoint\n");
    return kExitUsage;
  }
  if (a.endpoint.given() && !a.random_weights.empty()) {
    std::fprintf(stderr, "kernelllm optimize: --random-weights needs --model, not --endpoint\n");
    return kExitUsage;
  }
  OptimizeOptions o;
  o.k = a.k;
  o.rounds = a.rounds;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_p = a.top_p;
  o.sampling.top_k = a.top_k;
  o.sampling.seed = a.seed ? *a.seed : std::random_device{}();
  if (Status s = validate(o.sampling); !s.ok()) {
    std::fprintf(stderr, "kernelllm optimize: %s\n", s.to_string().c_str());
    return kExitUsage;
  }
  if (a.endpoint.given() && !a.device.empty()) {
    std::fprintf(stderr, "kernelllm optimize: --device is where the local model generates; with --endpoint the server "
                         "generates (--verify-device chooses where candidates are verified)\n");
    return kExitUsage;
  }
  auto devices = resolve_verify_devices(a.verify_device);
  if (!devices.ok()) {
    std::fprintf(stderr, "kernelllm optimize: %s\n", devices.status().message().c_str());
    return kExitUsage;
  }
  o.verify.devices = *devices;
  std::string gen_device;  // empty with --endpoint
  if (!a.endpoint.given()) {
    auto device = resolve_gen_device(a.device, "optimize");
    if (!device.ok()) {
      std::fprintf(stderr, "kernelllm optimize: %s\n", device.status().message().c_str());
      return kExitUsage;
    }
    gen_device = *device;
  }
  o.verify.profile = a.profile;
  o.verify.jobs = a.jobs;
  o.verify.sandbox = !a.no_sandbox;
  o.verify.use_cache = !a.no_cache;
  o.verify_while_generating = !a.verify_after_generation;
  if (auto d = parse_device(gen_device, "--device"); d.ok() && d->cuda) o.generation_gpu = "cuda:" + std::to_string(d->index_or_0());
  o.verify.cache_path = a.cache_file;
  if (a.verbose) o.verify.log = [](const std::string& line) { std::fprintf(stderr, "verify: %s\n", line.c_str()); };

  // Inputs first: a bad module or a missing model fails before anything is loaded.
  const fs::path module = a.module_file;
  if (!fs::is_regular_file(module)) {
    return fail(error(ErrorCode::not_found, "module: expected a readable file, found nothing at " + a.module_file));
  }
  auto code = read_text_file(module);
  if (!code.ok()) return fail(code.status());
  const std::string stem = module.stem().string();
  o.work_dir = a.work_dir.empty() ? fs::path(stem + "_optimize") : fs::path(a.work_dir);
  if (Status s = validate_optimize_input(*code, o); !s.ok()) return fail(s.with_context(a.module_file));
  const fs::path out_file = a.out_file.empty() ? fs::path(stem + "_triton.py") : fs::path(a.out_file);
  // `--json -`: the report on stdout (the table then on stderr) and in the work directory.
  const bool json_to_stdout = a.json_file == "-";
  const fs::path report_file = a.json_file.empty() || json_to_stdout ? o.work_dir / "report.json" : fs::path(a.json_file);

  // The verifier's interpreter probe and zygote start now, while the model loads (or the
  // endpoint is reached): the round's set-up then finds them started.
  harness::VerifierPrewarm prewarm(o.verify);
  Result<std::unique_ptr<CompletionSource>> source = error(ErrorCode::internal, "no source");
  Result<PromptTemplate> tmpl = error(ErrorCode::internal, "no template");
  Json endpoint_json = nullptr;
  EngineOptions eo;
  if (a.endpoint.given()) {
    auto eopts = endpoint_options(a.endpoint);
    if (!eopts.ok()) return fail(eopts.status());
    tmpl = endpoint_prompt_template(eopts->prompt, a.template_file);
    if (!tmpl.ok()) return fail(tmpl.status());
    endpoint_json = endpoint_facts(*eopts);
    std::fprintf(stderr, "generating through %s, model %s (seed %llu)\n", eopts->base_url.c_str(), eopts->model.c_str(),
                 static_cast<unsigned long long>(o.sampling.seed));
    source = open_endpoint(*eopts);
  } else {
    auto model_dir = find_or_download_model(a.model, a.hub);
    if (!model_dir.ok()) return fail(model_dir.status());
    tmpl = load_prompt_template(*model_dir, a.template_file);
    if (!tmpl.ok()) return fail(tmpl.status());
    eo.model = model_dir->string();
    eo.device = gen_device;
    eo.threads = a.threads;
    eo.random_config = a.random_weights;
    eo.random_seed = o.sampling.seed;
    eo.dtype = a.dtype;
    eo.gpu_memory_fraction = engine_memory_fraction(gen_device, o.verify.devices, a.gpu_memory_fraction);
    std::fprintf(stderr, "loading %s on %s (seed %llu)\n",
                 a.random_weights.empty() ? model_dir->c_str() : ("random " + a.random_weights + " weights").c_str(),
                 gen_device.c_str(), static_cast<unsigned long long>(o.sampling.seed));
    source = open_engine(eo);
  }
  if (!source.ok()) return fail(source.status());
  o.prompt_template = tmpl->text;
  if (a.no_sandbox) print_no_sandbox_warning();

  install_interrupt_cleanup("kernelllm optimize",
                            fmt::format("the work directory {} keeps the prompt and the candidates written so far",
                                        o.work_dir.string()));
  ProgressPrinter printer(o.rounds > 1);
  auto result = optimize(*code, **source, o, [&printer](const OptimizeEvent& e) { printer(e); });
  if (!result.ok()) return fail(result.status());

  const int exit_code = result->best ? 0 : kExitNothingCorrect;
  if (result->best) {
    if (Status s = write_text(out_file, result->candidates[*result->best].code); !s.ok()) return fail(s);
  }
  std::FILE* table_out = json_to_stdout ? stderr : stdout;
  print_table(*result, o.rounds > 1, out_file.string(), table_out);
  Json report = result->to_json();
  report["options"] = options_json(a, o, tmpl->source, gen_device, eo.gpu_memory_fraction, endpoint_json);
  report["out"] = result->best ? Json(fs::absolute(out_file).string()) : Json(nullptr);
  report["exit_code"] = exit_code;
  report["run"] = run_facts(result->environment);
  const std::string report_text = report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  if (Status s = write_text(report_file, report_text); !s.ok()) return fail(s);
  std::fprintf(table_out, "report: %s\n", report_file.c_str());
  if (json_to_stdout) std::fputs(report_text.c_str(), stdout);
  std::fflush(stdout);
  return exit_code;
}

}  // namespace

void add_optimize_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<OptimizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "optimize", "Turn a PyTorch module into a verified, faster Triton ModelNew (generate k, verify, keep the best)");
  cmd->footer(
      "Files: the work directory (default ./<module stem>_optimize/) holds problem.py, prompt.txt, "
      "round<r>/sample<i>.py (each candidate as verified), sample<i>.completion.txt (raw model text), refinement "
      "prompts, and report.json. The winning module goes to --out (default ./<module stem>_triton.py), written only "
      "when a candidate is correct.\n"
      "Exit codes: 0 a correct candidate was written; 3 the run finished but no candidate was correct (reasons "
      "printed, one per candidate); 1 the tool failed (bad module file, model not found, verifier could not run); "
      "2 usage error.");
  cmd->add_option("module", args->module_file, "PyTorch module file (KernelBench format: Model, get_inputs, get_init_inputs)")
      ->required();
  cmd->add_option("--model", args->model,
                  "Model directory, or an HF id (org/name) from the HF cache, downloaded there first when missing "
                  "(with --random-weights: only its tokenizer is used); or --endpoint URL");
  add_hub_options(cmd, args->hub);
  cmd->add_option("-k,--samples", args->k, "Candidates sampled in one batch")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 disables")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed (default: random, printed); also seeds --random-weights");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Most tokens generated per sample")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds,
                  "Rounds; from round 2 on, each failing candidate goes back to the model once with its verdict, "
                  "until one is correct")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--out", args->out_file, "Where the winning ModelNew module is written (default ./<module stem>_triton.py)");
  cmd->add_option("--json", args->json_file, "Report JSON (default <work dir>/report.json); - also writes it to stdout (the table then goes to stderr)");
  cmd->add_option("--work-dir", args->work_dir, "Directory for the problem copy, prompts, completions and candidates "
                                                "(default ./<module stem>_optimize; reused files are overwritten)");
  add_device_options(cmd, args->device, &args->verify_device);
  cmd->add_option("--dtype", args->dtype, "CUDA weights: bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}))->capture_default_str();
  cmd->add_option("--profile", args->profile, "strict (fp64 reference, normalized error) or kernelbench")
      ->check(CLI::IsMember({"strict", "kernelbench"}))
      ->capture_default_str();
  cmd->add_option("--prompt-template", args->template_file,
                  "Template with one '{}' field (default: the model's kernelllm.py, else built-in)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--random-weights", args->random_weights,
                  "Random weights of a named shape (e.g. llama-3.1-8b) instead of --model's weights: speed runs");
  cmd->add_option("--jobs,-j", args->jobs, "Parallel candidate workers (0: min(cores, candidates))")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-sandbox", args->no_sandbox, "Run candidates unconfined (debugging only; prints a warning)");
  cmd->add_flag("--no-cache", args->no_cache, "Neither read nor write the verifier's result cache");
  cmd->add_flag("--verify-after-generation", args->verify_after_generation,
                "Verify once every sample is written (default: each as soon as the model has written it, while it "
                "writes the others; candidates are timed once it is done)");
  cmd->add_option("--cache", args->cache_file, "Verifier result cache file (default ~/.cache/kernelllm/verify.sqlite)");
  cmd->add_option("--threads", args->threads, "CPU engine threads; 0 uses all cores")->check(CLI::NonNegativeNumber);
  add_gpu_memory_fraction_option(cmd, args->gpu_memory_fraction);
  cmd->add_flag("--verbose,-v", args->verbose, "Also print the verifier's progress lines");
  add_endpoint_options(cmd, args->endpoint);
  cmd->callback([&run, args] { run = [args] { return run_optimize(*args); }; });
}

}  // namespace kernelllm::cli
