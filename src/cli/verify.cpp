// `kernelllm verify PROBLEM.py CAND.py [CAND2.py ...]`: verdicts, timings and the sandbox line
// as a table on stdout, progress on stderr, everything as JSON with --json. Exit 0 when the
// verifier ran (whatever the verdicts), 1 on an infrastructure failure, 2 on usage errors.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "kernelllm/base/run_facts.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::cli {
namespace {

struct VerifyArgs {
  std::string problem;
  std::vector<std::string> candidates;
  std::string profile = "strict";
  std::string kernelbench_tolerance = "v0";
  std::string device = "cpu";
  std::string json_file;
  int jobs = 0;
  int trials = 5;
  bool no_sandbox = false;
  bool no_cache = false;
  std::string cache_file;
  bool timing = true;
  bool time_compile = false;
  bool multishape = true;
  bool quiet = false;
  double load_timeout_s = 120;
  double run_timeout_s = 30;
};

void print_table(const harness::VerifyReport& rep) {
  std::printf("%s\n", rep.sandbox.c_str());
  std::printf("problem: %s  profile: %s\n", rep.problem.c_str(), rep.profile.c_str());
  if (rep.reference_timing) {
    std::printf("reference: median %.4f ms (IQR %.4f)%s\n", rep.reference_timing->stats.median_ms,
                rep.reference_timing->stats.iqr_ms(), rep.reference_timing->meaningful ? "" : "  [timing not meaningful on CPU]");
  }
  if (rep.compile_timing) std::printf("torch.compile reference: median %.4f ms\n", rep.compile_timing->stats.median_ms);
  std::string header = fmt::format("{:<3} {:<34} {:<18} {:<28} {:>10} {:>11} {:>8} {:<6}", "#", "candidate", "verdict",
                                   "rule/reason", "max err", "median ms", "speedup", "shapes");
  std::printf("%s\n%s\n", header.c_str(), std::string(header.size(), '-').c_str());
  for (size_t i = 0; i < rep.candidates.size(); ++i) {
    const harness::CandidateResult& c = rep.candidates[i];
    std::string reason = c.rule.empty() ? c.message : c.rule + ": " + c.message;
    std::string err = "-";
    const Json* s = &c.stats;
    if (s->is_array() && !s->empty()) s = &(*s)[0];
    if (s->is_object() && s->contains("max_abs") && (*s)["max_abs"].is_number()) {
      err = fmt::format("{:.2e}", (*s)["max_abs"].get<double>());
    }
    std::string median = c.timing ? fmt::format("{:.4f}", c.timing->stats.median_ms) : "-";
    std::string speed = c.speedup > 0 ? fmt::format("{:.2f}x", c.speedup) : "-";
    std::string verdict = std::string(harness::verdict_name(c.verdict)) + (c.cached ? " (cached)" : "");
    std::string mark = rep.selected && *rep.selected == i ? "*" : "";
    // Multi-shape result beside the verdict: pass, FAIL, or - when not run.
    std::string shapes = !c.multishape ? "-" : c.multishape->verdict == harness::ShapeVerdict::pass ? "pass" : "FAIL";
    std::printf("%s\n", fmt::format("{:<3} {:<34} {:<18} {:<28} {:>10} {:>11} {:>8} {:<6}", std::to_string(i) + mark,
                                    path_cell(c.path, 34), verdict, cell(reason, 28), err, median, speed, shapes)
                            .c_str());
  }
  for (size_t i = 0; i < rep.candidates.size(); ++i) {
    const harness::CandidateResult& c = rep.candidates[i];
    if (!c.multishape || c.multishape->verdict == harness::ShapeVerdict::pass) continue;
    for (const harness::ShapeVariantResult& v : c.multishape->variants) {
      if (v.verdict == harness::Verdict::correct) continue;
      std::printf("shapes #%zu %s: %s (%s)\n", i, v.name.c_str(), std::string(harness::verdict_name(v.verdict)).c_str(),
                  cell(v.message, 160).c_str());
    }
  }
  if (rep.selected) std::printf("selected: #%zu %s (%s)\n", *rep.selected, rep.candidates[*rep.selected].path.c_str(), rep.selection_reason.c_str());
  else if (!rep.selection_reason.empty()) std::printf("selected: none (%s)\n", rep.selection_reason.c_str());
  for (const std::string& w : rep.warnings) std::printf("warning: %s\n", w.c_str());
}

int run_verify(const VerifyArgs& a) {
  harness::VerifyOptions o;
  auto devices = harness::parse_devices(a.device);
  if (!devices.ok()) {
    std::fprintf(stderr, "kernelllm verify: %s\n", devices.status().message().c_str());
    return kExitUsage;
  }
  o.devices = *devices;
  o.profile = a.profile;
  o.kernelbench_tolerance = a.kernelbench_tolerance;
  o.jobs = a.jobs;
  o.n_trials = a.trials;
  o.sandbox = !a.no_sandbox;
  o.use_cache = !a.no_cache;
  o.cache_path = a.cache_file;
  o.timing = a.timing;
  o.time_compile = a.time_compile;
  o.multishape = a.multishape;
  o.load_timeout_s = a.load_timeout_s;
  o.run_timeout_min_s = a.run_timeout_s;
  if (!a.quiet) o.log = [](const std::string& line) { std::fprintf(stderr, "verify: %s\n", line.c_str()); };
  if (a.no_sandbox) print_no_sandbox_warning();
  auto rep = harness::verify(a.problem, a.candidates, o);
  if (!rep.ok()) {
    std::fprintf(stderr, "kernelllm verify: error: %s\n", rep.status().to_string().c_str());
    return kExitFailure;
  }
  print_table(*rep);
  if (!a.json_file.empty()) {
    std::ofstream f(a.json_file);
    Json report = rep->to_json();
    report["run"] = run_facts(rep->environment);
    f << report.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "kernelllm verify: error: cannot write %s\n", a.json_file.c_str());
      return kExitFailure;
    }
  }
  return 0;
}

}  // namespace

void add_verify_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "verify Triton ModelNew candidates against a PyTorch Model (sandboxed)");
  cmd->add_option("problem", args->problem, "problem file (Model, get_inputs, get_init_inputs)")->required()->check(CLI::ExistingFile);
  cmd->add_option("candidates", args->candidates, "candidate files (ModelNew)")->required();
  cmd->add_option("--profile", args->profile, "strict (default: fp64 reference, normalized error) or kernelbench")
      ->check(CLI::IsMember({"strict", "kernelbench"}));
  cmd->add_option("--kernelbench-tolerance", args->kernelbench_tolerance,
                  "kernelbench profile: v0 (atol = rtol = 1e-2, KernelBench v0/v0.1, KernelLLM's evaluation) or current "
                  "(1e-4 for fp32, 1e-2 for fp16/bf16, as KernelBench's eval now compares)")
      ->check(CLI::IsMember({"v0", "current"}))
      ->capture_default_str();
  cmd->add_option("--device", args->device, "cpu (Triton interpreter), cuda (all visible), cuda:N or cuda:0,cuda:1");
  cmd->add_option("--json", args->json_file, "write the full report as JSON");
  cmd->add_option("--jobs,-j", args->jobs, "parallel candidate workers (0: min(cores, candidates))")->check(CLI::NonNegativeNumber);
  cmd->add_option("--trials", args->trials, "correctness trials per candidate")->check(CLI::Range(1, 100));
  cmd->add_flag("--no-sandbox", args->no_sandbox, "run candidates unconfined (debugging only; prints a warning)");
  cmd->add_flag("--no-cache", args->no_cache, "neither read nor write the result cache");
  cmd->add_option("--cache", args->cache_file, "result cache file (default ~/.cache/kernelllm/verify.sqlite)");
  cmd->add_flag("--timing,!--no-timing", args->timing, "time correct candidates (default on)");
  cmd->add_flag("--multishape,!--no-multishape", args->multishape,
                "re-check correct candidates with the problem's sizes changed (x0.5, x0.5 made odd); reported beside the verdict "
                "(default on)");
  cmd->add_flag("--compile", args->time_compile, "also time torch.compile(reference)");
  cmd->add_option("--load-timeout", args->load_timeout_s, "seconds for import + construction (+ first-run JIT)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--run-timeout", args->run_timeout_s, "minimum seconds per forward (scaled up by 50x the reference time)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--quiet,-q", args->quiet, "no progress lines on stderr");
  cmd->callback([args, &run] { run = [args] { return run_verify(*args); }; });
}

}  // namespace kernelllm::cli
