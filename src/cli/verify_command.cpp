// `kernelllm verify PROBLEM.py CAND.py [CAND2.py ...]`: verdicts, timings and the sandbox line
// as a table on stdout (stderr with `--json -`), progress on stderr, everything as JSON with
// --json. Exit 0: at least one candidate is correct; 3: none is; 2: usage errors (missing or
// unreadable files included, found before any work); 1: the verifier failed; 130/143: interrupted.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/devices.h"
#include "cli/interrupt.h"
#include "cli/progress.h"
#include "cli/table.h"
#include "kernelllm/base/run_facts.h"
#include "kernelllm/harness/subprocess.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::cli {
namespace {

struct VerifyArgs {
  std::string problem;
  std::vector<std::string> candidates;
  std::string profile = "strict";
  std::string kernelbench_tolerance = "v0";
  std::string verify_device;  // empty: resolve_verify_devices's default
  std::string device;         // the old spelling of --verify-device (verify generates nothing)
  std::string json_file;      // "-": stdout
  int jobs = 0;
  int trials = 5;
  bool no_sandbox = false;
  bool no_cache = false;
  std::string cache_file;
  bool timing = true;
  bool time_compile = false;
  bool multishape = true;
  bool quiet = false;
  bool progress = false;
  double load_timeout_s = 120;
  double run_timeout_s = 30;
  double run_timeout_factor = 50;
  double timing_budget_s = 5;
  std::string timing_cpu = "auto";
};

constexpr int kExitNothingCorrect = 3;

void print_table(const harness::VerifyReport& rep, std::FILE* out) {
  std::fprintf(out, "%s\n", rep.sandbox.c_str());
  std::fprintf(out, "problem: %s  profile: %s\n", rep.problem.c_str(), rep.profile.c_str());
  if (rep.reference_timing) {
    std::fprintf(out, "reference: median %.4f ms (IQR %.4f)%s\n", rep.reference_timing->stats.median_ms,
                rep.reference_timing->stats.iqr_ms(), rep.reference_timing->meaningful ? "" : "  [timing not meaningful on CPU]");
  }
  if (rep.compile_timing) std::fprintf(out, "torch.compile reference: median %.4f ms\n", rep.compile_timing->stats.median_ms);
  std::string header = fmt::format("{:<3} {:<34} {:<18} {:<28} {:>10} {:>11} {:>8} {:<6}", "#", "candidate", "verdict",
                                   "rule/reason", "max err", "median ms", "speedup", "shapes");
  std::fprintf(out, "%s\n%s\n", header.c_str(), std::string(header.size(), '-').c_str());
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
    std::fprintf(out, "%s\n", fmt::format("{:<3} {:<34} {:<18} {:<28} {:>10} {:>11} {:>8} {:<6}", std::to_string(i) + mark,
                                    path_cell(c.path, 34), verdict, cell(reason, 28), err, median, speed, shapes)
                            .c_str());
  }
  for (size_t i = 0; i < rep.candidates.size(); ++i) {
    const harness::CandidateResult& c = rep.candidates[i];
    if (!c.multishape || c.multishape->verdict == harness::ShapeVerdict::pass) continue;
    for (const harness::ShapeVariantResult& v : c.multishape->variants) {
      if (v.verdict == harness::Verdict::correct) continue;
      std::fprintf(out, "shapes #%zu %s: %s (%s)\n", i, v.name.c_str(), std::string(harness::verdict_name(v.verdict)).c_str(),
                  cell(v.message, 160).c_str());
    }
  }
  if (rep.selected) std::fprintf(out, "selected: #%zu %s (%s)\n", *rep.selected, rep.candidates[*rep.selected].path.c_str(), rep.selection_reason.c_str());
  else if (!rep.selection_reason.empty()) std::fprintf(out, "selected: none (%s)\n", rep.selection_reason.c_str());
  for (const std::string& w : rep.warnings) std::fprintf(out, "warning: %s\n", w.c_str());
}

// Every named file must be a readable regular file: checked before any worker starts.
int check_inputs(const VerifyArgs& a) {
  std::vector<std::pair<std::string, std::string>> files = {{"problem", a.problem}};
  for (const std::string& c : a.candidates) files.emplace_back("candidate", c);
  for (const auto& [what, path] : files) {
    std::error_code ec;
    const char* why = !std::filesystem::exists(path, ec)          ? "no such file"
                      : !std::filesystem::is_regular_file(path, ec) ? "not a regular file"
                      : ::access(path.c_str(), R_OK) != 0          ? "not readable"
                                                                    : nullptr;
    if (why != nullptr) {
      std::fprintf(stderr, "kernelllm verify: %s %s: %s\n", what.c_str(), path.c_str(), why);
      return kExitUsage;
    }
  }
  return 0;
}

int run_verify(const VerifyArgs& a) {
  if (int rc = check_inputs(a); rc != 0) return rc;
  if (!a.device.empty() && !a.verify_device.empty()) {
    std::fprintf(stderr, "kernelllm verify: expected one of --verify-device and --device (its old spelling), found both\n");
    return kExitUsage;
  }
  if (!a.device.empty()) std::fprintf(stderr, "kernelllm verify: note: --device is read as --verify-device here\n");
  harness::VerifyOptions o;
  auto devices = resolve_verify_devices(a.device.empty() ? a.verify_device : a.device);
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
  o.run_timeout_factor = a.run_timeout_factor;
  o.timing_budget_s = a.timing_budget_s;
  o.timing_cpu = a.timing_cpu == "auto" ? harness::kTimingCpuAuto
                 : a.timing_cpu == "off" ? harness::kTimingCpuOff
                                         : std::stoi(a.timing_cpu);  // checked by the option's validator
  if (!a.quiet) o.log = [](const std::string& line) { std::fprintf(stderr, "verify: %s\n", line.c_str()); };
  ProgressMeter meter("verify", a.progress);
  std::atomic<size_t> done{0};
  const size_t total = a.candidates.size();
  if (meter.enabled()) {
    o.on_result = [&meter, &done, total](size_t, const harness::CandidateResult&) {
      const size_t n = ++done;
      meter.update(n, total, fmt::format("{}/{} candidate(s) verified", n, total), n == total);
    };
  }
  if (a.no_sandbox) print_no_sandbox_warning();
  install_interrupt_cleanup("kernelllm verify", "");
  auto rep = harness::verify(a.problem, a.candidates, o);
  if (!rep.ok()) {
    std::fprintf(stderr, "kernelllm verify: error: %s\n", rep.status().to_string().c_str());
    return kExitFailure;
  }
  const bool json_to_stdout = a.json_file == "-";
  print_table(*rep, json_to_stdout ? stderr : stdout);
  Json report = rep->to_json();
  report["run"] = run_facts(rep->environment);
  const std::string json = report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  if (json_to_stdout) {
    std::fputs(json.c_str(), stdout);
    std::fflush(stdout);
  } else if (!a.json_file.empty()) {
    std::ofstream f(a.json_file);
    f << json;
    if (!f) {
      std::fprintf(stderr, "kernelllm verify: error: cannot write %s\n", a.json_file.c_str());
      return kExitFailure;
    }
  }
  for (const harness::CandidateResult& c : rep->candidates) {
    if (c.verdict == harness::Verdict::correct) return 0;
  }
  std::fprintf(stderr, "kernelllm verify: no candidate is correct (exit %d)\n", kExitNothingCorrect);
  return kExitNothingCorrect;
}

}  // namespace

void add_verify_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "verify Triton ModelNew candidates against a PyTorch Model (sandboxed)");
  cmd->footer(
      "Exit codes: 0 at least one candidate is correct; 3 none is correct; 2 usage error (a missing or unreadable "
      "problem or candidate file included, found before any work); 1 the verifier failed; 130/143 interrupted "
      "(SIGINT/SIGTERM: workers stopped, temporary files removed).");
  cmd->add_option("problem", args->problem, "problem file (Model, get_inputs, get_init_inputs)")->required();
  cmd->add_option("candidates", args->candidates, "candidate files (ModelNew)")->required();
  cmd->add_option("--profile", args->profile, "strict (default: fp64 reference, normalized error) or kernelbench")
      ->check(CLI::IsMember({"strict", "kernelbench"}));
  cmd->add_option("--kernelbench-tolerance", args->kernelbench_tolerance,
                  "kernelbench profile: v0 (atol = rtol = 1e-2, KernelBench v0/v0.1, KernelLLM's evaluation) or current "
                  "(1e-4 for fp32, 1e-2 for fp16/bf16, as KernelBench's eval now compares)")
      ->check(CLI::IsMember({"v0", "current"}))
      ->capture_default_str();
  cmd->add_option("--verify-device", args->verify_device,
                  "where candidates are verified: cpu (Triton interpreter), cuda (all visible), cuda:N or cuda:0,cuda:1 "
                  "(default: cuda when a GPU is visible, else cpu)");
  cmd->add_option("--device", args->device, "old spelling of --verify-device (verify generates nothing)");
  cmd->add_option("--json", args->json_file, "write the full report as JSON; - writes it to stdout (the table then goes to stderr)");
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
  cmd->add_option("--run-timeout", args->run_timeout_s,
                  "minimum seconds per run (inputs, forward, checksums); longer where --run-timeout-factor x the "
                  "judge's first make_inputs call (reference forwards included) is more")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--run-timeout-factor", args->run_timeout_factor,
                  "a run's limit is at least this many times the judge's first make_inputs call")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--timing-budget", args->timing_budget_s,
                  "seconds of round trips per timed batch: a slow kernel's batch stops after 5 timed round trips once they "
                  "took this long (docs/verification.md, Timing)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--timing-cpu", args->timing_cpu,
                  "the CPU that runs timed round trips (this process's thread, the judge and the candidate pinned to it): "
                  "auto (on a GPU, one per GPU; none on the CPU), off, or a CPU number this process may use")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto" || v == "off") return "";
        int cpu = -1;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), cpu);
        if (ec != std::errc() || end != v.data() + v.size() || cpu < 0) return "expected auto, off or a CPU number";
        const std::vector<int> allowed = harness::allowed_cpus(::getpid());
        if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end()) {
          return fmt::format("CPU {} is not one this process may run on ({})", cpu, harness::cpu_list(allowed));
        }
        return "";
      })
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", args->quiet, "no verifier log lines on stderr");
  cmd->add_flag("--progress", args->progress, "progress lines with elapsed time and ETA (default: when stderr is a terminal)");
  cmd->callback([args, &run] { run = [args] { return run_verify(*args); }; });
}

}  // namespace kernelllm::cli
