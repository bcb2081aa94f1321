// `kernelllm eval` (score a model or pre-generated candidates on a problem set; resumable),
// `kernelllm eval report RUN` (rebuild the report from a store) and `kernelllm eval merge RUN...
// --out RUN` (combine shard stores). Summary table on stdout, progress on stderr.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/devices.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/endpoint_args.h"
#include "cli/hub.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/eval/eval.h"
#include "kernelllm/eval/kernelbench.h"

namespace kernelllm::cli {
namespace {

struct EvalArgs {
  std::string problems;
  std::string levels;
  std::string model;
  HubOptions hub;
  std::string candidates;
  std::string out;
  int k = 20;
  std::string device;         // generation; empty: resolve_gen_device's default
  std::string verify_device;  // empty: resolve_verify_devices's default
  std::string profiles = "strict,kernelbench";
  std::string shard = "0/1";
  float temperature = kKernelLLMTemperature;
  float top_p = kKernelLLMTopP;
  uint64_t seed = 0;
  int max_new_tokens = 2048;
  int jobs = 0;
  int problem_jobs = 0;
  int trials = 5;
  int threads = 0;
  double gpu_memory_fraction = 0.0;
  bool no_sandbox = false;
  bool timing = true;
  bool multishape = false;
  std::string prompt_template;
  std::string pass_at = "1,10,20";
  bool quiet = false;
  bool progress = false;
  EndpointArgs endpoint;
  // report / merge
  std::string report_run;
  bool report_partial = false;
  std::vector<std::string> merge_inputs;
  std::string merge_out;
  // export-kernelbench
  std::string export_run;
  std::string export_out;
  std::string export_profile = "kernelbench";
  int export_level = 0;
};

int fail(const Status& status) {
  std::fprintf(stderr, "kernelllm eval: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

int usage(const std::string& message) {
  std::fprintf(stderr, "kernelllm eval: %s\n", message.c_str());
  return kExitUsage;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) out.push_back(part);
  return out;
}

// --pass-at has the syntax of --levels (distinct positive integers, comma-separated).
Result<eval::MetricsOptions> metrics_options(const std::string& pass_at) {
  auto ks = eval::parse_levels(pass_at);
  if (!ks.ok()) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("expected distinct positive integers separated by commas (\"1,10,20\"), found \"{}\"", pass_at));
  }
  eval::MetricsOptions m;
  m.ks = *ks;
  return m;
}

int print_report(const Json& report) {
  auto table = eval::summary_table(report);
  if (!table.ok()) return fail(table.status());
  std::fputs(table->c_str(), stdout);
  return 0;
}

int run_eval_command(const EvalArgs& a) {
  eval::EvalOptions o;
  o.problems = a.problems;
  o.out = a.out;
  if (a.problems.empty() || a.out.empty()) return usage("expected --problems DIR and --out RUN (see --help)");
  if (static_cast<int>(!a.model.empty()) + static_cast<int>(!a.candidates.empty()) + static_cast<int>(a.endpoint.given()) != 1) {
    return usage("expected exactly one of --model DIR, --endpoint URL and --candidates DIR");
  }
  if (!a.levels.empty()) {
    auto levels = eval::parse_levels(a.levels);
    if (!levels.ok()) return usage(levels.status().message());
    o.levels = *levels;
  }
  auto shard = eval::parse_shard(a.shard);
  if (!shard.ok()) return usage(shard.status().message());
  o.shard = *shard;
  auto metrics = metrics_options(a.pass_at);
  if (!metrics.ok()) return usage("--pass-at: " + metrics.status().message());
  o.metrics = *metrics;
  o.profiles = split_commas(a.profiles);
  for (const std::string& p : o.profiles) {
    if (p != "strict" && p != "kernelbench") return usage(fmt::format("--profiles: expected strict and/or kernelbench, found \"{}\"", p));
  }
  o.candidates = a.candidates;
  if (!a.device.empty() && a.model.empty()) {
    return usage("--device is where the local model generates; with --candidates or --endpoint nothing is generated "
                 "here: use --verify-device for where candidates are verified");
  }
  if (!a.model.empty()) {
    auto model_dir = find_or_download_model(a.model, a.hub);
    if (!model_dir.ok()) return fail(model_dir.status());
    o.model = model_dir->string();
  }
  o.k = a.k;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_p = a.top_p;
  o.sampling.seed = a.seed;
  o.prompt_template_file = a.prompt_template;
  if (Status s = validate(o.sampling); !s.ok()) return usage(s.message());
  auto devices = resolve_verify_devices(a.verify_device);
  if (!devices.ok()) return usage(devices.status().message());
  o.verify.devices = *devices;
  o.verify.jobs = a.jobs;
  o.problem_jobs = a.problem_jobs;
  o.verify.n_trials = a.trials;
  o.verify.sandbox = !a.no_sandbox;
  o.verify.timing = a.timing;
  o.multishape = a.multishape;
  if (!a.quiet) {
    o.progress = [](const std::string& line) { std::fprintf(stderr, "eval: %s\n", line.c_str()); };
  }
  if (a.no_sandbox) {
    std::fprintf(stderr, "\n*** WARNING: --no-sandbox: candidate code runs UNCONFINED with your user's rights, network and files. ***\n\n");
  }
  eval::SourceFactory open_source;
  if (a.endpoint.given()) {
    auto eopts = endpoint_options(a.endpoint);
    if (!eopts.ok()) return fail(eopts.status());
    o.endpoint = *eopts;
    open_source = [e = *eopts]() { return open_endpoint(e); };
  } else if (a.candidates.empty()) {
    auto device = resolve_gen_device(a.device, "eval");
    if (!device.ok()) return usage(device.status().message());
    o.gen_device = *device;
    EngineOptions engine;
    engine.model = o.model;
    engine.device = *device;
    engine.threads = a.threads;
    engine.gpu_memory_fraction = engine_memory_fraction(*device, o.verify.devices, a.gpu_memory_fraction);
    open_source = [engine]() { return open_engine(engine); };
  }
  ProgressMeter meter("eval", a.progress);
  if (meter.enabled()) {
    o.on_tick = [&meter](const eval::EvalTick& t) {
      std::string what = fmt::format("problem {}/{} {}", std::min(t.problem + 1, t.problems), t.problems, t.id);
      if (t.phase == "generating") what += fmt::format(": generating, {:.1f} kB of text so far", static_cast<double>(t.text_bytes) / 1e3);
      else if (t.phase == "done") what += ": done";
      else what += fmt::format(": {}, {}/{} verdict(s)", t.phase, t.verified, t.to_verify);
      meter.update(t.problem, t.problems, what, t.phase == "done" && t.problem == t.problems);
    };
  }
  install_interrupt_cleanup("kernelllm eval", fmt::format("the run store {} keeps every sample and verdict committed so far; "
                                                          "resume with the same command: {}",
                                                          a.out, quoted_command_line()));
  auto report = eval::run_eval(o, open_source);
  if (!report.ok()) return fail(report.status());
  std::fprintf(stderr, "eval: wrote %s/report.json and %s/report.html\n", a.out.c_str(), a.out.c_str());
  return print_report(*report);
}

int run_report_command(const EvalArgs& a) {
  auto metrics = metrics_options(a.pass_at);
  if (!metrics.ok()) return usage("--pass-at: " + metrics.status().message());
  auto report = eval::write_run_report(a.report_run, *metrics, a.report_partial);
  if (!report.ok()) return fail(report.status());
  std::fprintf(stderr, "eval: wrote %s/report.json and %s/report.html\n", a.report_run.c_str(), a.report_run.c_str());
  return print_report(*report);
}

int run_merge_command(const EvalArgs& a) {
  auto metrics = metrics_options(a.pass_at);
  if (!metrics.ok()) return usage("--pass-at: " + metrics.status().message());
  std::vector<std::filesystem::path> inputs(a.merge_inputs.begin(), a.merge_inputs.end());
  auto report = eval::merge_runs(inputs, a.merge_out, *metrics);
  if (!report.ok()) return fail(report.status());
  std::fprintf(stderr, "eval: merged %zu run(s) into %s; wrote report.json and report.html there\n", inputs.size(),
               a.merge_out.c_str());
  return print_report(*report);
}

int run_export_kernelbench_command(const EvalArgs& a) {
  int missing = 0;
  auto text = eval::kernelbench_eval_results(a.export_run, a.export_profile,
                                             a.export_level > 0 ? std::optional<int>(a.export_level) : std::nullopt, &missing);
  if (!text.ok()) return fail(text.status());
  std::FILE* f = std::fopen(a.export_out.c_str(), "wb");
  if (!f) return fail(error(ErrorCode::io_error, fmt::format("cannot open {} for writing", a.export_out)));
  const bool written = std::fwrite(text->data(), 1, text->size(), f) == text->size();
  if (std::fclose(f) != 0 || !written) return fail(error(ErrorCode::io_error, fmt::format("cannot write {}", a.export_out)));
  std::fprintf(stderr, "eval: wrote %s (KernelBench eval_results.json, profile %s)%s\n", a.export_out.c_str(),
               a.export_profile.c_str(),
               missing ? fmt::format("; {} sample(s) without a verdict left out", missing).c_str() : "");
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "score a model or pre-generated candidates on a problem set (pass@k, fast_p; resumable)");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--problems", args->problems, "KernelBench root (level1/, ...) or a directory of problem .py files");
  cmd->add_option("--levels", args->levels, "KernelBench levels, e.g. 1 or 1,2,3 (default 1; KernelBench roots only)");
  cmd->add_option("--model", args->model, "model to generate samples with: a directory, or an HF id (org/name) from the HF "
                                           "cache, downloaded there first when missing");
  add_hub_options(cmd, args->hub);
  cmd->add_option("--candidates", args->candidates, "pre-generated samples: DIR/<problem file stem>/<sample>.py, or a KernelBench run directory "
                  "(level_N_problem_M_sample_K_kernel.py); no model needed");
  cmd->add_option("--out", args->out, "run directory (created; an existing one is resumed)");
  cmd->add_option("-k", args->k, "samples per problem (with --model or --endpoint)")->check(CLI::Range(1, 10000));
  add_device_options(cmd, args->device, &args->verify_device);
  cmd->add_option("--profiles", args->profiles, "verifier profiles, comma-separated (default strict,kernelbench)");
  cmd->add_option("--shard", args->shard, "i/N: only problems j with j % N == i (merge shards with `eval merge`)");
  cmd->add_option("--temperature", args->temperature, "sampling temperature; 0 is greedy");
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass in (0, 1]");
  cmd->add_option("--seed", args->seed, "sampling seed (the same for every problem; default 0)");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "tokens per sample (default 2048)")->check(CLI::PositiveNumber);
  cmd->add_option("--jobs,-j", args->jobs, "parallel candidate workers (0: min(cores, candidates))")->check(CLI::NonNegativeNumber);
  cmd->add_option("--problem-jobs", args->problem_jobs,
                  "problems verified at once, each with its own judges and workers (with --candidates or --endpoint; "
                  "GPU timing stays one candidate at a time per GPU; default: half the cores when verifying on GPUs, "
                  "else 1)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--trials", args->trials, "correctness trials per candidate")->check(CLI::Range(1, 100));
  cmd->add_option("--threads", args->threads, "CPU generation threads (0: all cores)")->check(CLI::NonNegativeNumber);
  add_gpu_memory_fraction_option(cmd, args->gpu_memory_fraction);
  cmd->add_flag("--no-sandbox", args->no_sandbox, "run candidates unconfined (debugging only; prints a warning)");
  cmd->add_flag("--timing,!--no-timing", args->timing, "time correct candidates (default on)");
  cmd->add_flag("--multishape,!--no-multishape", args->multishape,
                "re-check correct samples with the problem's sizes changed (x0.5, x0.5 made odd); reported in each "
                "sample's result beside its verdict (default off)");
  cmd->add_option("--prompt-template", args->prompt_template, "template file with one {} (default: the model's kernelllm.py, else built-in)");
  cmd->add_option("--pass-at", args->pass_at, "k values for pass@k, comma-separated (default 1,10,20)");
  cmd->add_flag("--quiet,-q", args->quiet, "no per-event log lines on stderr");
  cmd->add_flag("--progress", args->progress, "progress lines with elapsed time and ETA (default: when stderr is a terminal)");
  add_endpoint_options(cmd, args->endpoint);

  CLI::App* report = cmd->add_subcommand("report", "rebuild RUN/report.json and RUN/report.html from a run store");
  report->add_option("run", args->report_run, "run directory")->required();
  report->add_option("--pass-at", args->pass_at, "k values for pass@k, comma-separated (default 1,10,20)");
  report->add_flag("--partial", args->report_partial,
                   "report an incomplete run over the problems with every verdict; the others are listed as left out");
  report->callback([args, &run] { run = [args] { return run_report_command(*args); }; });

  CLI::App* merge = cmd->add_subcommand("merge", "combine shard runs (same options apart from --shard) into one run");
  merge->add_option("runs", args->merge_inputs, "shard run directories")->required();
  merge->add_option("--out", args->merge_out, "the merged run directory (new)")->required();
  merge->add_option("--pass-at", args->pass_at, "k values for pass@k, comma-separated (default 1,10,20)");
  merge->callback([args, &run] { run = [args] { return run_merge_command(*args); }; });

  CLI::App* kb = cmd->add_subcommand("export-kernelbench", "write a run's verdicts as KernelBench's eval_results.json");
  kb->add_option("run", args->export_run, "run directory")->required();
  kb->add_option("--out", args->export_out, "the eval_results.json to write")->required();
  kb->add_option("--profile", args->export_profile, "verifier profile to export (default kernelbench)")
      ->check(CLI::IsMember({"strict", "kernelbench"}));
  kb->add_option("--level", args->export_level, "the level to export when the run covers several")->check(CLI::PositiveNumber);
  kb->callback([args, &run] { run = [args] { return run_export_kernelbench_command(*args); }; });

  cmd->callback([args, cmd, &run] {
    if (cmd->get_subcommands().empty()) run = [args] { return run_eval_command(*args); };
  });
}

}  // namespace kernelllm::cli
