// One candidate on one pre-warmed worker: load, correctness trials (each compared by the
// judge, which re-evaluates the cheat rules from the run facts), then timing under the
// device's lock with the orchestrator's own clock, the roofline floor and the event/wall checks.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <regex>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxTensorBytes = uint64_t{4} << 30;

// Errors that mean the candidate ran into a sandbox wall rather than a bug of its own.
bool looks_like_sandbox_wall(const std::string& text) {
  static const std::regex re(
      "Read-only file system|Network is unreachable|Temporary failure in name resolution|Name or service not known|"
      "Permission denied|Operation not permitted|can't start new thread|Resource temporarily unavailable|"
      "BlockingIOError");
  return std::regex_search(text, re);
}

// Memory-limit kills show up in the cgroup's counters.
bool cgroup_saw_oom(const Worker& w) {
  if (!w.cgroup) return false;
  for (const std::string& d : w.cgroup->dirs) {
    std::ifstream v1(d + "/memory.failcnt");
    long n = 0;
    if (v1 >> n && n > 0) return true;
    std::ifstream v2(d + "/memory.events");
    std::string key;
    long val = 0;
    while (v2 >> key >> val) {
      if ((key == "oom_kill" || key == "oom") && val > 0) return true;
    }
  }
  return false;
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

// The input sets of timed runs: the dedicated timing sets, else the correctness trials'.
const std::vector<TrialInput>& timing_sets(const DeviceState& dev) {
  return dev.timing_inputs.empty() ? dev.trials : dev.timing_inputs;
}

// Where the worker writes the output of a timed run's last call.
fs::path last_timed_output(const Worker& w) { return w.work_dir / "out-timed-last.safetensors"; }

}  // namespace

double Verifier::run_timeout_s(const DeviceState& dev) const {
  double ref_ms = 0;
  for (const TrialInput& t : dev.trials) ref_ms = std::max(ref_ms, t.reference_ms);
  return std::max(opts_.run_timeout_min_s, opts_.run_timeout_factor * ref_ms / 1000.0);
}

void Verifier::check_gpu_after_fault(DeviceState& dev, CandidateResult& r) {
  if (!dev.cuda()) return;
  Status health = gpu_health_check(py_, dev.name, 60);
  r.evidence["gpu_health_after"] = health.ok() ? "ok" : health.message();
  if (!health.ok()) {
    dev.root().healthy = false;
    warn(fmt::format("{} is unhealthy after a candidate's {}: {}; no further candidates run on it", dev.name,
                     verdict_name(r.verdict), health.message()));
  }
}

bool Verifier::fail_from_reply(const Reply& reply, const std::string& phase, double timeout_s, Worker& w, DeviceState& dev,
                               CandidateResult& r) {
  if (reply.ok()) return false;
  r.evidence["phase"] = phase;
  if (reply.status != ReceiveStatus::ok) {
    // A worker that closed its pipe is usually dying: give it a moment so that its own exit
    // status (signal) is the evidence rather than our SIGKILL.
    if (reply.status == ReceiveStatus::closed) w.proc.wait(deadline_in(2));
    w.proc.kill_tree();
    r.stderr_tail = tail(w.proc.stderr_tail(), 4000);
    r.evidence["exit"] = w.describe_exit();
    r.evidence["stdout_tail"] = tail(w.proc.stdout_tail(), 2000);
    if (reply.status == ReceiveStatus::timeout) {
      r.verdict = Verdict::timeout;
      r.message = fmt::format("no reply to {} within {:.0f} s; process tree killed", phase, timeout_s);
    } else if (reply.status == ReceiveStatus::protocol_error) {
      // A frame we cannot trust (garbled, or written by the candidate's own code): the worker is
      // alive but its replies mean nothing any more.
      r.verdict = Verdict::crash;
      r.rule = "protocol";
      r.message = fmt::format("broke the reply protocol during {}: {}; process tree killed", phase, reply.error);
    } else if (cgroup_saw_oom(w)) {
      r.verdict = Verdict::crash;
      r.rule = "out_of_memory";
      r.message = fmt::format("killed at the memory limit during {} ({})", phase, w.describe_exit());
    } else {
      r.verdict = Verdict::crash;
      r.message = fmt::format("worker died during {}: {} ({})", phase, w.describe_exit(), reply.error);
    }
    check_gpu_after_fault(dev, r);
    return true;
  }
  std::string kind = reply.error_kind();
  const Json& err = reply.message["error"];
  r.message = reply.error_message();
  r.evidence["traceback"] = tail(err.value("traceback", ""), 4000);
  r.stderr_tail = tail(w.proc.stderr_tail(), 4000);
  r.rule = kind;
  if (kind == "compile_error") r.verdict = Verdict::compile_error;
  else if (kind == "runtime_error") r.verdict = Verdict::runtime_error;
  else if (kind == "environment_error") r.verdict = Verdict::environment_error;
  else if (kind == "cheat" || kind == "sandbox_violation") {
    r.verdict = kind == "cheat" ? Verdict::cheat : Verdict::sandbox_violation;
    r.rule = err.value("rule", kind);
    if (err.contains("evidence")) r.evidence["rule_evidence"] = err["evidence"];
  } else if (kind == "cuda_fault") {
    // A sticky CUDA error (illegal address, launch failure): the process's context is gone.
    w.proc.kill_tree();
    r.verdict = Verdict::crash;
    check_gpu_after_fault(dev, r);
  }
  else r.verdict = Verdict::crash;  // protocol/internal: the worker is in a state we cannot trust
  if ((r.verdict == Verdict::compile_error || r.verdict == Verdict::runtime_error) && sandbox_.active() &&
      looks_like_sandbox_wall(r.message)) {
    r.evidence["error_kind"] = kind;
    r.verdict = Verdict::sandbox_violation;
    r.rule = "blocked_by_sandbox";
  }
  return true;
}

bool Verifier::load_candidate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r) {
  fs::path module = w.work_dir / "candidate.py";
  {
    std::ofstream f(module, std::ios::binary);
    f << sources_[i];
    if (!f) {
      r.verdict = Verdict::not_verified;
      r.message = "cannot write " + module.string();
      return false;
    }
  }
  Json init = dev.problem.value("init", Json::object());
  Json req{{"op", "load"},
           {"module_path", module.string()},
           {"init", init},
           {"construct_seed", dev.problem.value("construct_seed", 0)},
           {"device", dev.name},
           {"work_dir", dev.shared_dir.string()},
           {"max_tensor_bytes", kMaxTensorBytes}};
  Reply reply = w.request(req, opts_.load_timeout_s);
  r.evidence["load_ms"] = reply.elapsed_ms;
  return !fail_from_reply(reply, "load", opts_.load_timeout_s, w, dev, r);
}

void Verifier::evaluate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r) {
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  r.evidence = Json::object();
  r.evidence["worker_pid"] = w.hello.value("pid", 0);
  // Wall time per phase as the orchestrator saw it (waits for the GPU lock included), for
  // throughput accounting; start_ms (waiting for a pre-warmed worker) is added by the caller.
  Json& phases = r.evidence["phases"] = Json::object();
  auto t0 = Clock::now();
  const bool loaded = load_candidate(i, w, dev, r);
  phases["compile_ms"] = ms_since(t0);
  if (!loaded) return;
  t0 = Clock::now();
  run_trials(w, dev, r);
  phases["correctness_ms"] = ms_since(t0);
  if (r.verdict == Verdict::correct && opts_.timing) {
    t0 = Clock::now();
    time_candidate(w, dev, r);
    phases["timing_ms"] = ms_since(t0);
  }
}

void Verifier::run_trials(Worker& w, DeviceState& dev, CandidateResult& r) {
  bool undiscriminating = false;
  Json trials = Json::array();
  for (size_t t = 0; t < dev.trials.size(); ++t) {
    const TrialInput& in = dev.trials[t];
    fs::path out = w.work_dir / fmt::format("out-{}.safetensors", t);
    // The first run also JIT-compiles the Triton kernels.
    double timeout = run_timeout_s(dev) + (t == 0 ? opts_.load_timeout_s : 0);
    Json req{{"op", "run"},           {"inputs_file", in.file.string()}, {"n_inputs", in.n_inputs},
             {"scalars", in.scalars}, {"outputs_file", out.string()},    {"poison", true},
             {"require_triton", true}, {"max_tensor_bytes", kMaxTensorBytes}, {"poison_sizes", in.output_sizes}};
    Reply run;
    if (dev.cuda()) {
      GpuGuard gpu(dev.root().gpu_mu, dev.root().gpu_lock, GpuGuard::Mode::shared);
      run = w.request(req, timeout);
    } else {
      run = w.request(req, timeout);
    }
    if (fail_from_reply(run, fmt::format("run (trial {})", t), timeout, w, dev, r)) {
      r.evidence["trial"] = t;
      return;
    }
    Json facts = run.message;
    facts.erase("ok");
    facts.erase("v");
    Reply cmp = judge_call(dev, Json{{"op", "compare"}, {"trial", t}, {"outputs_file", out.string()}, {"run_report", facts},
                                     {"require_triton", true}},
                           opts_.load_timeout_s);
    if (!cmp.ok()) {
      r.verdict = Verdict::not_verified;
      r.message = fmt::format("the judge could not compare trial {}: {}: {}", t, cmp.error_kind(), cmp.error_message());
      return;
    }
    const Json& c = cmp.message;
    trials.push_back(Json{{"trial", t}, {"distribution", in.distribution}, {"run_ms", facts.value("run_ms", 0.0)},
                          {"triton_launches", facts.value("triton_launches", Json(nullptr))}, {"match", c.value("match", false)}});
    r.stats = c.value("stats", Json());
    if (!c.value("match", false)) {
      std::string hint = c.value("verdict_hint", "wrong_output");
      r.verdict = verdict_from_name(hint).value_or(Verdict::wrong_output);
      r.rule = c.value("rule", Json(nullptr)).is_string() ? c["rule"].get<std::string>() : "";
      r.message = fmt::format("trial {} ({}): {}", t, in.distribution, c.value("message", ""));
      for (const char* k : {"violations", "evidence", "first_mismatch", "tolerance_trusted", "baselines_passing"}) {
        if (c.contains(k)) r.evidence[k] = c[k];
      }
      r.evidence["trial"] = t;
      r.evidence["trials"] = trials;
      r.stderr_tail = tail(w.proc.stderr_tail(), 4000);
      return;
    }
    if (c.value("verdict_hint", "correct") == "undiscriminating") {
      undiscriminating = true;
      r.evidence["baselines_passing"] = c.value("baselines_passing", Json());
      r.message = c.value("message", "");
    }
  }
  r.evidence["trials"] = trials;
  if (undiscriminating) {
    r.verdict = Verdict::undiscriminating;
    r.rule = "zeros_would_pass";
    return;
  }
  r.verdict = Verdict::correct;
  r.message = fmt::format("{} trial(s) match", dev.trials.size());
}

Json Verifier::time_request(const DeviceState& dev, int iters) const {
  Json files = Json::array();
  const std::vector<TrialInput>& sets = timing_sets(dev);
  for (const TrialInput& t : sets) files.push_back(t.file.string());
  const TrialInput& first = sets.front();
  return Json{{"inputs_files", files}, {"n_inputs", first.n_inputs},  {"scalars", first.scalars},
              {"warmup", dev.cuda() ? opts_.warmup : 1}, {"iters", iters}, {"flush_l2", dev.cuda()},
              {"max_tensor_bytes", kMaxTensorBytes}};
}

namespace {

Result<TimingResult> timing_from(const Reply& reply, bool meaningful) {
  if (!reply.ok()) return error(ErrorCode::internal, reply.error_kind() + ": " + reply.error_message());
  TimingResult t;
  t.meaningful = meaningful;
  for (const auto& v : reply.message.value("times_ms", Json::array())) {
    if (v.is_number()) t.times_ms.push_back(v.get<double>());
  }
  t.stats = timing_stats(t.times_ms);
  t.event_total_ms = reply.message.value("event_total_ms", 0.0);
  t.wall_total_ms = reply.message.value("wall_total_ms", 0.0);
  t.orchestrator_wall_ms = reply.elapsed_ms;
  if (t.times_ms.empty()) return error(ErrorCode::parse_error, "timing reply without times_ms");
  return t;
}

}  // namespace

std::optional<TimingResult> Verifier::time_reference(DeviceState& dev, bool compile) {
  Json req = time_request(dev, dev.cuda() ? opts_.iters : 3);
  req["op"] = "time_reference";
  req["compile"] = compile;
  auto t = timing_from(judge_call(dev, req, opts_.timing_timeout_s), dev.cuda());
  if (t.ok()) return *t;
  warn(fmt::format("{}reference timing on {} failed: {}", compile ? "torch.compile " : "", dev.name, t.status().message()));
  return std::nullopt;
}

void Verifier::ensure_reference_timing(DeviceState& dev) {
  if (dev.ref_timing_tried) return;
  dev.ref_timing_tried = true;
  dev.ref_timing = time_reference(dev, false);
  if (opts_.time_compile) dev.compile_timing = time_reference(dev, true);
}

// The orchestrator's clock bounds the worker's: a worker that reports more time than passed, or
// events longer than its own wall clock, patched something; no median beats the roofline floor.
std::string clock_violation(const TimingResult& tr, double floor_ms, uint64_t bytes, double peak_gbs) {
  double event_sum = std::accumulate(tr.times_ms.begin(), tr.times_ms.end(), 0.0);
  if (tr.wall_total_ms > tr.orchestrator_wall_ms * 1.02 + 1.0 || event_sum > tr.orchestrator_wall_ms * 1.02 + 1.0) {
    return fmt::format("worker reports {:.3f} ms wall / {:.3f} ms events, but only {:.3f} ms passed on the orchestrator's clock",
                       tr.wall_total_ms, event_sum, tr.orchestrator_wall_ms);
  }
  if (event_sum > tr.wall_total_ms * 1.05 + 0.5) {
    return fmt::format("event total {:.3f} ms exceeds the worker's wall clock {:.3f} ms", event_sum, tr.wall_total_ms);
  }
  if (tr.stats.median_ms < floor_ms) {
    return fmt::format("median {:.5f} ms is below the roofline floor {:.5f} ms ({} bytes at {:.0f} GB/s)", tr.stats.median_ms,
                       floor_ms, bytes, peak_gbs);
  }
  return "";
}

double per_call_wall_gap_ms(const TimingResult& t) {
  return t.times_ms.empty() ? 0 : t.wall_total_ms / static_cast<double>(t.times_ms.size()) - t.stats.median_ms;
}

// Work the events do not see (side streams) shows as a per-call wall-clock gap far larger than
// the reference's gap, which has the same flush and synchronize overheads. The bound is loose on
// purpose: an honest Python wrapper around a Triton launch adds tens to hundreds of microseconds
// per call (measured on the H100: 0.9 ms gap vs the reference's 0.3 ms for a candidate that
// caches its output buffer), so only hidden work well beyond that is flagged; small side-stream
// launches are the worker's side_stream rule's to catch. Empty when the run passes.
std::string gap_violation(const TimingResult& tr, const TimingResult& ref) {
  double gap = per_call_wall_gap_ms(tr), ref_gap = per_call_wall_gap_ms(ref);
  if (gap - ref_gap <= std::max(2.0, 5.0 * tr.stats.median_ms)) return "";
  return fmt::format("per-call wall-clock gap {:.3f} ms vs the reference's {:.3f} ms with an event median of {:.4f} ms",
                     gap, ref_gap, tr.stats.median_ms);
}

bool Verifier::timed_run(Worker& w, DeviceState& dev, CandidateResult& r, std::optional<TimingResult>* fresh_ref) {
  Json req = time_request(dev, dev.cuda() ? opts_.iters : 3);
  req["op"] = "time";
  const fs::path last_out = last_timed_output(w);
  std::error_code ec;
  fs::remove(last_out, ec);  // a run that writes no output must not be judged on an earlier run's
  req["outputs_file_last"] = last_out.string();
  Reply reply;
  {
    GpuGuard lock(dev.gpu_mu, dev.gpu_lock, GpuGuard::Mode::exclusive);
    ensure_reference_timing(dev);
    if (fresh_ref) *fresh_ref = time_reference(dev, false);
    reply = w.request(req, opts_.timing_timeout_s);
  }
  if (fail_from_reply(reply, "timing", opts_.timing_timeout_s, w, dev, r)) return false;
  auto t = timing_from(reply, dev.cuda());
  if (!t.ok()) {
    r.verdict = Verdict::crash;
    r.message = "malformed timing reply: " + t.status().message();
    return false;
  }
  r.timing = *t;
  const std::optional<TimingResult>& ref = fresh_ref && *fresh_ref ? *fresh_ref : dev.ref_timing;
  r.speedup = dev.cuda() && ref && t->stats.median_ms > 0 ? ref->stats.median_ms / t->stats.median_ms : 0.0;
  return timed_output_right(w, dev, r);
}

bool Verifier::timed_output_right(Worker& w, DeviceState& dev, CandidateResult& r) {
  // The output of the last timed call must still be right (no cached or replayed answers). The
  // worker's timed loop gives the last call alone the last input set (worker/timing.py), so the
  // answer cannot be a replay; the index is ours, never taken from the candidate's reply.
  const int last_trial = timing_sets(dev).back().trial;
  const fs::path last_out = last_timed_output(w);
  if (!fs::exists(last_out)) {
    // The worker writes the last output only when it is plain tensors, as every trial's was.
    r.verdict = Verdict::cheat;
    r.rule = "timed_output_mismatch";
    r.message = "the last timed call returned no plain tensor output, unlike the correctness trials";
    return false;
  }
  Reply cmp = judge_call(dev, Json{{"op", "compare"}, {"trial", last_trial}, {"outputs_file", last_out.string()}},
                         opts_.load_timeout_s);
  if (!cmp.ok()) {
    r.verdict = Verdict::not_verified;
    r.message = fmt::format("the judge could not compare the last timed output: {}: {}", cmp.error_kind(),
                            cmp.error_message());
    return false;
  }
  if (cmp.message.value("match", false)) return true;
  r.verdict = Verdict::cheat;
  // Skipped or replayed work during timing: the times do not measure the computation.
  r.rule = "timed_output_mismatch";
  r.message = fmt::format("the last timed call's output (inputs of trial {}) is wrong, so the timed calls skipped or "
                          "replayed work: {}",
                          last_trial, cmp.message.value("message", ""));
  return false;
}

void Verifier::time_candidate(Worker& w, DeviceState& dev, CandidateResult& r) {
  if (!timed_run(w, dev, r, nullptr) || !dev.cuda()) return;
  const TrialInput& in = timing_sets(dev).front();
  const uint64_t bytes = in.input_bytes + in.output_bytes;
  const double peak = opts_.peak_bandwidth_gbs > 0 ? opts_.peak_bandwidth_gbs : peak_bandwidth_for(dev.hardware);
  const double floor_ms = roofline_floor_ms(bytes, peak);
  r.evidence["roofline_floor_ms"] = floor_ms;
  auto cheat = [&r](const std::string& why) {
    r.verdict = Verdict::cheat;
    r.rule = "timing_implausible";
    r.message = why;
  };
  // The checks of the run in r.timing: false once a clock check names a cheat; else the gap
  // evidence against `ref` (when there is one) is recorded and `gap` is the gap rule's finding.
  auto check = [&](const TimingResult* ref, std::string& gap) {
    if (std::string why = clock_violation(*r.timing, floor_ms, bytes, peak); !why.empty()) {
      cheat(why);
      return false;
    }
    if (ref != nullptr) {
      r.evidence["wall_gap_ms"] = per_call_wall_gap_ms(*r.timing);
      r.evidence["reference_wall_gap_ms"] = per_call_wall_gap_ms(*ref);
      gap = gap_violation(*r.timing, *ref);
    }
    return true;
  };
  std::string first_gap;
  if (!check(dev.ref_timing ? &*dev.ref_timing : nullptr, first_gap) || first_gap.empty()) return;

  // The reference was timed once, maybe while the GPU was quiet; processes outside our lock
  // (another tool's kernels, a busy host) widen a later candidate's gap without any hidden work.
  // Re-time the reference and the candidate back to back under the lock: hidden work shows again,
  // outside load widens both. The re-timed run is checked like the first and is the one reported.
  Json recheck = {{"first_wall_gap_ms", r.evidence["wall_gap_ms"]},
                  {"first_reference_wall_gap_ms", r.evidence["reference_wall_gap_ms"]},
                  {"first_median_ms", r.timing->stats.median_ms},
                  {"first_speedup", r.speedup > 0 ? Json(r.speedup) : Json(nullptr)},
                  {"first_finding", first_gap}};
  std::optional<TimingResult> fresh_ref;
  const bool ran = timed_run(w, dev, r, &fresh_ref);
  recheck["reference_retimed"] = fresh_ref.has_value();
  r.evidence["timing_recheck"] = recheck;
  std::string second_gap;
  if (!ran || !check(fresh_ref ? &*fresh_ref : &*dev.ref_timing, second_gap)) return;
  r.evidence["timing_recheck"]["cleared"] = second_gap.empty();
  if (!second_gap.empty()) {
    return cheat(fmt::format("{}, and again when re-timed back to back with the reference: {}: work outside the "
                             "timed stream",
                             first_gap, second_gap));
  }
  r.message += fmt::format("; timing re-checked: the first run's {} did not recur beside a re-timed reference (load "
                           "outside kernelllm's GPU lock)",
                           first_gap);
}

}  // namespace kernelllm::harness
