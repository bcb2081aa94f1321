// A device's judge: its start (forked by the zygote, forked again or started by exec when it does
// not greet) and its set-up of the problem (the problem loaded, trial 0's inputs and references
// made, the other trials and the timing sets declared). verify.cpp drives them.
#include "verifier.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace kernelllm::harness {
namespace fs = std::filesystem;

std::string Verifier::judge_pool_key(const DeviceState& dev) const {
  return fmt::format("{}\n{}\n{}\n{}", py_.executable, package_dir_.string(), dev.name, dev.parent ? "variants" : "problem");
}

Status Verifier::spawn_judge(DeviceState& dev, bool by_exec) {
  if (dev.judge) return {};
  fs::path work_dir = run_dir_ / fmt::format("judge-{}", dev.tag());
  std::vector<std::string> extra_env;
  if (opts_.reuse_judges && zygote_ && !by_exec) {
    // One an earlier call released (greeted, its CUDA context made): no start at all.
    if (std::unique_ptr<Worker> kept = JudgePool::shared().take(judge_pool_key(dev))) {
      kept->proc.set_cancel(opts_.cancel);
      dev.judge = std::move(kept);
      ++judges_reused_;
      return {};
    }
    // A judge that may be kept works in the pool's directory, which outlives this call's, and
    // snapshots its process at its greeting for its release to compare with (judge_reuse.py).
    if (auto kept_dir = JudgePool::shared().work_dir(dev.tag()); kept_dir.ok()) {
      work_dir = *kept_dir;
      extra_env.emplace_back("KERNELLLM_JUDGE_KEEPABLE=1");
    }
  }
  std::string note;
  // A size variant's judge only compares (it times nothing): one hardware queue for its CUDA
  // context, which the driver then makes in ~0.08 s instead of ~0.2 s of the time it makes
  // contexts one at a time (16 at once on an H200: 1.3-1.6 s against 3.6 s in all).
  if (dev.parent) extra_env.emplace_back("CUDA_DEVICE_MAX_CONNECTIONS=1");
  auto judge = spawn_worker("judge", py_, package_dir_, work_dir, {}, dev.name, nullptr,
                            std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2),
                            by_exec ? nullptr : zygote_.get(), &note, extra_env);
  note_exec_start(note);
  if (!judge.ok()) return judge.status();
  dev.judge = std::move(*judge);
  dev.judge->proc.set_cancel(opts_.cancel);
  ++judges_started_;
  return {};
}

void Verifier::end_or_keep_judge(DeviceState& dev) {
  if (!dev.judge) return;
  std::unique_ptr<Worker> judge = std::move(dev.judge);
  // Every device it served must be healthy: a lost slot's process, or one whose GPU was taken out
  // of use, is ended.
  bool healthy = dev.healthy && dev.root().healthy;
  for (auto& v : dev.root().variants) {
    if (&v->judge_owner() == &dev && !v->healthy) healthy = false;
  }
  if (opts_.reuse_judges && healthy && judge->started_by == "zygote" && judge->proc.running() &&
      !judge->hello.is_null() && JudgePool::shared().made(judge->work_dir)) {
    // (No hold of the GPU: what the release frees, the process's exit freed before, without one.)
    std::lock_guard lock(dev.judge_mu);
    Reply r = judge->request(Json{{"op", "release"}}, 30);
    if (r.ok() && r.message.value("reusable", false) == true) {
      JudgePool::shared().put(judge_pool_key(dev), std::move(judge));
      return;
    }
    const std::string why = r.ok() ? r.message.value("why", std::string("(no reason given)")) : r.error_kind() + ": " + r.error_message();
    warn(fmt::format("the judge on {} was ended after {}, not kept for the next problem: {}", dev.name,
                     fs::path(problem_path_).filename().string(), why.substr(0, 400)));
  }
  JudgePool::shared().end(std::move(judge));
}

Status Verifier::start_judge(DeviceState& dev) {
  if (dev.judge_host) {  // its host variant's process, started (and greeted) by setup_variants
    if (dev.judge_host->judge && !dev.judge_host->judge->hello.is_null()) return {};
    return error(ErrorCode::internal, "the size variants' judge did not start: " + dev.judge_host->unusable);
  }
  KLLM_RETURN_IF_ERROR(spawn_judge(dev).with_context("judge on " + dev.name));
  // A forked judge that did not greet (seen in CI and on an H200: "the intermediate process did
  // not exit" within 10 s): forked once more, then started by exec (seconds of imports on a loaded
  // host), the call not lost; the report says why.
  for (int attempt = 0;; ++attempt) {
    Status hello = await_hello(*dev.judge, opts_.start_timeout_s);
    if (hello.ok()) break;
    if (dev.judge->started_by != "zygote" || attempt == 2) return hello.with_context("judge on " + dev.name);
    JudgePool::shared().end(std::move(dev.judge));  // (never greeted: killed, its directory removed)
    const std::string why = "a judge the zygote forked did not greet: " + hello.message().substr(0, 300);
    if (attempt == 0) warn(why + "; forked again");
    if (attempt == 1) note_exec_start(why);
    KLLM_RETURN_IF_ERROR(spawn_judge(dev, /*by_exec=*/attempt == 1).with_context("judge on " + dev.name));
  }
  return {};
}

Status Verifier::setup_device(DeviceState& dev) {
  // Named before (a pre-warmed worker or a variant's may bind it already).
  if (dev.shared_dir.empty()) dev.shared_dir = run_dir_ / fmt::format("shared-{}", dev.tag());
  fs::create_directories(dev.shared_dir);
  KLLM_RETURN_IF_ERROR(start_judge(dev));  // (nothing when it has greeted: a variant's, started by start_variants)
  if (!dev.parent) report_.timeline_ms["judge_started"] = ms_from_start();
  // The judge's GPU work (the problem's model, references, inputs) waits while another verify call
  // on this GPU times something, as correctness runs do; its start above (torch imported) did not:
  // a wait for a process to start under the lock held every timing of the GPU's other calls back
  // (and, behind their waiting timings, every correctness run: 5-27 s waits on an H200 with four
  // calls at once).
  // Held for the problem's load, and again for trial 0 (the other trials are declared without it).
  std::optional<GpuUse> busy;
  busy.emplace(dev, GpuGuard::Mode::shared, "setup", gpu_use_);
  int n_requested = dev.parent ? std::max(1, std::min(opts_.n_trials, opts_.multishape_trials)) : opts_.n_trials;
  Json req{{"op", "load_problem"},  {"problem_path", fs::absolute(problem_path_).string()},
           {"device", dev.name},    {"profile", opts_.profile},
           {"secret_seed", secret_seed_}, {"work_dir", dev.shared_dir.string()},
           {"n_trials", n_requested}, {"kernelbench_tolerance", opts_.kernelbench_tolerance}};
  if (dev.parent) {
    req["size_scale"] = dev.variant.size_scale;
    req["size_odd"] = dev.variant.size_odd;
  }
  Reply r = judge_call(dev, req, opts_.load_timeout_s);
  if (!r.ok()) {
    return error(ErrorCode::invalid_argument, fmt::format("problem {} on {}: {}: {}", problem_path_, dev.name, r.error_kind(),
                                                          r.error_message()));
  }
  dev.problem = r.message;
  busy.reset();  // (a timer that waits goes before trial 0)
  if (dev.parent) {
    // A judge that ignores size_scale would re-check the same sizes: only its own report counts.
    if (!dev.problem.contains("size_globals") || !dev.problem["size_globals"].is_object()) {
      return error(ErrorCode::unsupported, "the judge does not report size_globals (no size variants)");
    }
    dev.size_globals = dev.problem["size_globals"];
    bool changed = false;
    for (const auto& [name, pair] : dev.size_globals.items()) {
      if (pair.is_array() && pair.size() == 2 && pair[0] != pair[1]) changed = true;
    }
    if (!changed) return error(ErrorCode::not_found, "the problem has no size globals that the judge can change");
  }
  int n = dev.problem.value("n_trials", n_requested);
  Json dists = dev.problem.value("trial_distributions", Json::array());
  // Correctness trials, then fresh inputs for timing (trials n.. in the judge's numbering) so
  // that a timed call can never replay an answer cached during the correctness runs: one set per
  // call (warmup included, as many calls per round trip as may be chosen) where they fit
  // kTimingSetBytes, at least 2 (set after trial 0). Only trial 0 is made now (its sizes size
  // everything else); the judge makes the others' references when first needed (the sets a timed
  // batch uses all at once, before the reference is timed) and keeps a bounded number
  // (worker/judge.py, KEEP_BYTES).
  int n_timing = opts_.timing && !dev.parent ? (timed_calls(dev) + warmup_calls(dev)) *
                                                   (dev.cuda() ? kMaxCallsPerTrip : kCpuCallsPerTrip)
                                             : 0;
  std::error_code ec;
  fs::path init = dev.shared_dir / "init.safetensors";
  if (fs::exists(init, ec)) {
    fs::permissions(init, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read,
                    fs::perm_options::replace, ec);
  }
  // Trial 0: inputs and references made now (its sizes size everything else).
  {
    busy.emplace(dev, GpuGuard::Mode::shared, "setup", gpu_use_);
    TrialInput in;
    in.trial = 0;
    in.distribution = n > 0 && !dists.empty() ? dists[0].get<std::string>() : "normal";
    Reply m = judge_call(dev, Json{{"op", "make_inputs"}, {"trial", 0}, {"distribution", in.distribution}}, opts_.load_timeout_s);
    if (!m.ok() || !m.message.contains("seed")) {
      return error(ErrorCode::invalid_argument, fmt::format("problem {}: make_inputs(0) on {}: {}: {}", problem_path_, dev.name,
                                                            m.error_kind(), m.error_message()));
    }
    if (dev.cuda() && !dev.parent && opts_.timing) {
      // The L2 flush's round trip before any candidate of this call has loaded: its quickest caps
      // the idle baseline the reference's batches measure (timed_calls.cpp, kFloorCapFactor).
      double floor_ms = 0;
      for (int k = 0; k < 5; ++k) {
        Reply f = judge_call(dev, Json{{"op", "l2_flush"}}, 60);
        if (f.ok() && (floor_ms == 0 || f.elapsed_ms < floor_ms)) floor_ms = f.elapsed_ms;
      }
      dev.flush_floor_ms = floor_ms;
    }
    busy.reset();
    in.seed = m.message["seed"].get<int64_t>();
    in.probe = m.message.value("probe", false);
    in.input_bytes = m.message.value("input_bytes", uint64_t{0});
    in.output_bytes = m.message.value("output_bytes", uint64_t{0});
    in.output_sizes = m.message.value("output_sizes", Json::array());
    // make_inputs runs the reference forward (and the fp64 one): an upper bound on its time.
    in.reference_ms = m.elapsed_ms;
    // Each timing set costs its inputs (held on the candidate's and the judge's device while
    // timed) and its outputs.
    if (const uint64_t set_bytes = in.input_bytes + 3 * in.output_bytes; n_timing > 2 && set_bytes > 0) {
      n_timing = static_cast<int>(std::clamp<uint64_t>(kTimingSetBytes / set_bytes, 2, static_cast<uint64_t>(n_timing)));
    }
    KLLM_RETURN_IF_ERROR(check_problem_memory(MemoryNeed{dev.shared_dir, in.input_bytes, in.output_bytes,
                                                         static_cast<uint64_t>(std::max(1, jobs_)), !dev.cuda(),
                                                         static_cast<uint64_t>(n_timing)})
                             .with_context(fmt::format("problem {} on {}", problem_path_, dev.name)));
    (n > 0 ? dev.trials : dev.timing_inputs).push_back(std::move(in));
  }
  // The others declared at once (their seeds; nothing made, so no GPU): every set of a problem has
  // trial 0's shapes (get_inputs under another seed), so its sizes and reference time are copied.
  Json declare = Json::array();
  for (int t = 1; t < n + n_timing; ++t) {
    const bool timing = t >= n;
    declare.push_back(Json{{"trial", t},
                           {"distribution", !timing && t < static_cast<int>(dists.size()) ? dists[static_cast<size_t>(t)].get<std::string>()
                                                                                            : "normal"}});
  }
  if (declare.empty()) return {};
  const size_t n_declared = declare.size();
  Reply d = judge_call(dev, Json{{"op", "declare_trials"}, {"trials", declare}}, opts_.load_timeout_s);
  const Json seeds = d.ok() ? d.message.value("seeds", Json(nullptr)) : Json(nullptr);
  if (!seeds.is_array() || seeds.size() != n_declared ||
      !std::all_of(seeds.begin(), seeds.end(), [](const Json& x) { return x.is_number_integer(); })) {
    return error(ErrorCode::invalid_argument, fmt::format("problem {}: declare_trials on {}: {}", problem_path_, dev.name,
                                                          d.ok() ? fmt::format("no list of {} integer seeds", n_declared)
                                                                 : d.error_kind() + ": " + d.error_message()));
  }
  const TrialInput first = dev.trials.empty() ? dev.timing_inputs.front() : dev.trials.front();
  for (size_t k = 0; k < n_declared; ++k) {
    TrialInput in = first;
    in.trial = declare[k]["trial"].get<int>();
    in.distribution = declare[k]["distribution"].get<std::string>();
    in.seed = seeds[k].get<int64_t>();
    in.probe = false;  // (only trial 0 carries the probe)
    (in.trial >= n ? dev.timing_inputs : dev.trials).push_back(std::move(in));
  }
  return {};
}

}  // namespace kernelllm::harness
