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

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A worker's own account of a request's time (its reply's steps_ms), as "<side>.<step>" in
// `steps`: at most 16 steps of sane names and values (untrusted; reports only).
void add_reply_steps(const Reply& rep, const std::string& side, Json& steps) {
  if (!rep.ok() || !rep.message.contains("steps_ms") || !rep.message["steps_ms"].is_object()) return;
  int n = 0;
  for (const auto& [step, ms] : rep.message["steps_ms"].items()) {
    if (++n > 16) break;
    if (step.size() <= 32 && ms.is_number() && ms.get<double>() >= 0 && ms.get<double>() < 1e9) {
      steps[side + "." + step] = ms.get<double>();
    }
  }
}

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

// The trusted process-flood check: the candidate cgroup's pids counters, read out here where
// the candidate cannot reset them (the guard's in-process count only names the attempt).
// Records them as evidence; true when they decided the verdict.
bool flood_from_cgroup(const Worker& w, int max_tasks, CandidateResult& r) {
  PidsFacts f = read_pids(w);
  r.evidence["processes"] = f.to_json();
  std::string why = process_flood_evidence(f, max_tasks, w.base_processes);
  if (why.empty()) return false;
  r.verdict = Verdict::sandbox_violation;
  r.rule = "process_flood";
  r.message = why;
  return true;
}

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

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
    } else if (flood_from_cgroup(w, opts_.max_tasks, r)) {
      r.message += fmt::format("; the worker died during {} ({})", phase, w.describe_exit());
    } else if (cgroup_saw_oom(w)) {
      r.verdict = Verdict::crash;
      r.rule = "out_of_memory";
      r.message = fmt::format("the candidate used more than its sandbox's memory limit of {:.1f} GiB during {} ({}); "
                              "the limit is kernelllm's, sized from the problem (inputs, outputs, timing sets)",
                              static_cast<double>(w.memory_limit_bytes) / (1 << 30), phase, w.describe_exit());
    } else {
      r.verdict = Verdict::crash;
      r.message = fmt::format("worker died during {}: {} ({})", phase, w.describe_exit(), reply.error);
      // SIGKILL that was neither ours nor the cgroup's: the host's OOM killer, not our limit.
      if (w.describe_exit().find("signal 9") != std::string::npos) {
        r.message += "; not at kernelllm's memory limit: the host itself may have run out of memory";
      }
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
  // A process or thread refused at the cgroup's task limit makes the candidate's next fork fail
  // (Triton's first launch on a GPU runs ldconfig): the flood is the cause, not the wall it hit.
  if ((r.verdict == Verdict::compile_error || r.verdict == Verdict::runtime_error) && sandbox_.active()) {
    const std::string said = r.message;
    if (flood_from_cgroup(w, opts_.max_tasks, r)) {
      r.evidence["error_kind"] = kind;
      r.message += fmt::format(" (during {}: {})", phase, said.substr(0, 300));
      return true;
    }
  }
  if ((r.verdict == Verdict::compile_error || r.verdict == Verdict::runtime_error) && sandbox_.active() &&
      looks_like_sandbox_wall(r.message)) {
    r.evidence["error_kind"] = kind;
    r.verdict = Verdict::sandbox_violation;
    r.rule = "blocked_by_sandbox";
  }
  return true;
}

bool Verifier::load_candidate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r) {
  // The judge audits the source text we hold (never a file the candidate can rewrite) before any
  // candidate code runs (worker/kernel_audit.py): a @triton.jit body that calls torch or a plain
  // Python helper is a compile_error. What the audit says for later (kernel names for the GPU
  // profile; no @triton.jit kernel at all, or a default-precision tl.dot in CPU mode, as cheats
  // if the candidate passes) waits in r.evidence["source_audit"] for evaluate().
  {
    constexpr size_t kMaxAuditSourceBytes = size_t{512} << 10;  // base64 of it stays under the 1 MiB frame
    const std::string& src = sources_[i];
    if (src.size() > kMaxAuditSourceBytes) {
      r.verdict = Verdict::compile_error;
      r.rule = "source_too_large";
      r.message = fmt::format("the candidate source is {} bytes; the verifier audits sources of up to {} bytes (the "
                              "worker protocol's 1 MiB frame)",
                              src.size(), kMaxAuditSourceBytes);
      r.evidence["phase"] = "source audit";
      return false;
    }
    const std::string b64 = base64_encode(src);
    const auto t_audit = Clock::now();
    Reply audit = judge_call(dev,
                             Json{{"op", "audit_source"}, {"source_b64", b64}, {"require_triton", true},
                                  {"path", fs::path(candidate_paths_[i]).filename().string()}},
                             opts_.load_timeout_s);
    if (!audit.ok()) {
      r.verdict = Verdict::not_verified;
      r.message = fmt::format("the judge could not audit the source: {}: {}", audit.error_kind(), audit.error_message());
      return false;
    }
    // Where the load went (evidence.load_steps_ms): the audit's wait for the judge (busy with the
    // problem's other requests) and its own time; send_load adds the load's.
    r.evidence["load_steps_ms"] = Json{{"audit", ms_since(t_audit)}, {"audit.judge", audit.elapsed_ms}};
    const Json& a = audit.message;
    Json kept{{"kernels", a.value("kernel_names", Json::array())},
              {"after_correct", a.value("after_correct", Json(nullptr))},
              {"tl_dot", a.value("tl_dot", Json::array())},
              {"notes", a.value("notes", Json::array())}};
    r.evidence["source_audit"] = kept;
    const Json lv = a.value("load_verdict", Json(nullptr));
    if (lv.is_object()) {
      r.verdict = verdict_from_name(lv.value("verdict", "compile_error")).value_or(Verdict::compile_error);
      r.rule = lv.value("rule", "compile_error");
      r.message = lv.value("message", "");
      r.evidence["phase"] = "source audit";
      if (lv.contains("evidence")) r.evidence["rule_evidence"] = lv["evidence"];
      return false;
    }
  }
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
  Json steps = r.evidence["load_steps_ms"];
  if (dev.cuda()) {
    // The worker's CUDA context first, one process of this GPU at a time (ContextTurn), under a
    // shared hold of its own: the driver makes one context at a time for the host, up to seconds
    // each while many processes start, and a timer waits for every shared holder. Made within the
    // loads' holds all at once, contexts queued in the driver under the lock: over 168 candidates on
    // an H200 (8 problems at once) the timers waited 70 s of a 137 s lock span, loads first. Made
    // outside the lock, contexts slowed the timed batches beside them (docs/verification.md).
    const auto t_ctx = Clock::now();
    Reply ctx;
    {
      ContextTurn turn(dev.root().gpu_lock);
      steps["context_turn"] = ms_since(t_ctx);
      auto busy = use_gpu(dev, GpuGuard::Mode::shared, "load");
      ctx = w.request(Json{{"op", "init_device"}, {"device", dev.name}}, opts_.load_timeout_s, yield_hook(busy, w, dev));
    }
    steps["init_device"] = ms_since(t_ctx);
    add_reply_steps(ctx, "init_device", steps);
    if (!ctx.ok()) {
      r.evidence["load_steps_ms"] = std::move(steps);
      // No candidate code has run in this process: not the candidate's verdict (and never cached);
      // a rerun verifies it again.
      w.proc.kill_tree();
      r.verdict = Verdict::not_verified;
      r.evidence["phase"] = "load (the CUDA context)";
      r.message = fmt::format("its process could not start CUDA on {} before the candidate ran ({}: {})", dev.name,
                              ctx.error_kind(), ctx.error_message());
      check_gpu_after_fault(dev, r);
      return false;
    }
  }
  Json req = load_request(dev, "load");
  req["module_path"] = module.string();
  req["device"] = dev.name;
  const bool loaded = send_load(w, dev, req, "load", r, &steps);
  r.evidence["load_steps_ms"] = std::move(steps);
  return loaded;
}

// The multi-shape check's load: ModelNew of size variant `v` constructed in a candidate's process
// that has loaded it (multishape.cpp).
bool Verifier::load_variant(Worker& w, DeviceState& v, CandidateResult& r) {
  Json req = load_request(v, "load_variant");
  req["variant"] = v.variant.name;
  return send_load(w, v, req, "load (size variant)", r);
}

// What `load` and `load_variant` both send: the problem's text with `dev`'s input recipe, and its
// judge's init inputs and construction seed (init.safetensors in its shared directory).
Json Verifier::load_request(const DeviceState& dev, const char* op) const {
  return Json{{"op", op},
              {"problem", Json{{"source_b64", reference_b64_}, {"recipe", dev.problem.value("inputs_recipe", Json::object())}}},
              {"init", dev.problem.value("init", Json::object())},
              {"construct_seed", dev.problem.value("construct_seed", 0)},
              {"work_dir", dev.shared_dir.string()},
              {"max_tensor_bytes", kMaxTensorBytes}};
}

bool Verifier::send_load(Worker& w, DeviceState& dev, const Json& req, const std::string& phase, CandidateResult& r,
                         Json* steps) {
  Reply reply;
  {
    // Construction and the first compiles run on the GPU: not while something is timed there.
    const auto t_wait = Clock::now();
    auto busy = use_gpu(dev, GpuGuard::Mode::shared, "load");
    // Where the load went: the wait for a shared hold, the request (its yields to a timer
    // included) and the worker's own account of it.
    if (steps) (*steps)["hold_wait"] = ms_since(t_wait);
    reply = w.request(req, opts_.load_timeout_s, yield_hook(busy, w, dev));
  }
  r.evidence["load_ms"] = reply.elapsed_ms;
  if (steps) {
    (*steps)["request"] = reply.elapsed_ms;
    add_reply_steps(reply, "worker", *steps);
  }
  if (fail_from_reply(reply, phase, opts_.load_timeout_s, w, dev, r)) return false;
  if (flood_from_cgroup(w, opts_.max_tasks, r)) {
    r.evidence["phase"] = phase;
    return false;
  }
  return true;
}

void Verifier::evaluate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r) {
  r.evidence = Json::object();
  r.evidence["worker_pid"] = w.hello.value("pid", 0);
  r.evidence["worker_start"] = w.started_by;
  // How many of Triton's modules the zygote built were placed in its cache (its greeting, sent
  // before any candidate code ran): 0 by exec, in the interpreter, or where the zygote could not.
  if (const Json& placed = w.hello.value("triton_warm_placed", Json(0)); placed.is_number_integer()) {
    r.evidence["triton_warm_placed"] = placed.get<int64_t>();
  }
  // Wall time per phase as the orchestrator saw it (waits for the GPU lock included), for
  // throughput accounting; start_ms (waiting for a pre-warmed worker) is added by the caller.
  Json& phases = r.evidence["phases"] = Json::object();
  auto t0 = Clock::now();
  const bool loaded = load_candidate(i, w, dev, r);
  phases["compile_ms"] = ms_since(t0);
  if (!loaded) return;
  t0 = Clock::now();
  Json profiled;  // on a GPU: the facts of the profiled run (the last trial's)
  // The profiled run's exclusive hold of the GPU, kept through its comparison and the kernel
  // check (where the judge profiles its own baseline and reference, the problem's first time)
  // into the timing: one taking of the GPU per candidate instead of two, each of which waits for
  // every shared hold under way to end and stops everything else of ours on the GPU meanwhile.
  std::optional<GpuUse> held;
  run_trials(w, dev, r, dev.cuda() ? &profiled : nullptr, opts_.timing || dev.cuda() ? &held : nullptr);
  phases["correctness_ms"] = ms_since(t0) - phases.value("reference_timing_ms", 0.0);
  if ((r.verdict == Verdict::correct || r.verdict == Verdict::cheat) && r.evidence.contains("source_audit")) {
    // What the judge's audit found that only matters for a passing candidate: no @triton.jit kernel
    // in the source (no_triton_kernel), or, in CPU mode only (the judge decides by its device), a
    // default-precision tl.dot the interpreter computes in exact fp32 where a GPU uses TF32. A
    // source without any kernel is named so even when a run-time rule (torch_fallback) fired
    // first: the static fact is the more specific one.
    const Json after = r.evidence["source_audit"].value("after_correct", Json(nullptr));
    const bool applies = r.verdict == Verdict::correct ||
                         (after.is_object() && after.value("rule", "") == "no_triton_kernel" && r.rule == "torch_fallback");
    if (after.is_object() && applies) {
      r.verdict = Verdict::cheat;
      r.rule = after.value("rule", "precision_downgrade");
      r.message = after.value("message", "");
      r.evidence["rule_evidence"] = after.value("evidence", "");
      r.evidence["phase"] = "source audit (after correctness)";
    }
  }
  if (r.verdict == Verdict::correct && dev.cuda()) {
    t0 = Clock::now();
    check_kernel_profile(dev, r, profiled);
    phases["kernel_profile_ms"] = ms_since(t0);
  }
  if (r.verdict != Verdict::correct || !opts_.timing) held.reset();
  if (r.verdict == Verdict::correct && opts_.timing) {
    t0 = Clock::now();
    time_candidate(w, dev, r, &held);
    phases["timing_ms"] = ms_since(t0);
    if (r.verdict == Verdict::correct && flood_from_cgroup(w, opts_.max_tasks, r)) r.evidence["phase"] = "timing";
  }
}

Reply Verifier::run_on_trial(Worker& w, DeviceState& dev, const TrialInput& in, const fs::path& out, double timeout_s,
                             bool profile_kernels, std::optional<GpuUse>* held) {
  // The candidate learns this trial's seed with this request (docs/trust-boundary.md, Inputs).
  Json req{{"op", "run"},       {"inputs", in.spec()},    {"outputs_file", out.string()},
           {"poison", true},    {"require_triton", true}, {"poison_sizes", in.output_sizes}};
  if (profile_kernels) req["profile_kernels"] = true;
  if (!dev.cuda()) return w.request(req, timeout_s);
  // The profiled run has the GPU to itself: its kernel times are compared with the reference's.
  if (profile_kernels && held) {
    if (*held) {
      (*held)->continue_as("profiled run");  // after the reference's timing
    } else {
      held->emplace(dev, GpuGuard::Mode::exclusive, "profiled run", gpu_use_);
    }
    return w.request(req, timeout_s, yield_hook(**held, w, dev));
  }
  auto busy = profile_kernels ? use_gpu(dev, GpuGuard::Mode::exclusive, "profiled run")
                              : use_gpu(dev, GpuGuard::Mode::shared, "run");
  return w.request(req, timeout_s, yield_hook(busy, w, dev));
}

void Verifier::note_profiled_steps(CandidateResult& r, const Reply& run, const Reply& cmp) {
  // Where the profiled run and its check went (the GPU held exclusively): the two
  // requests' round trips, the judge's steps of its comparison, and the candidate's own account
  // of its run (untrusted: shown in reports, never used for a verdict or a time).
  Json steps{{"run", run.elapsed_ms}, {"check", cmp.elapsed_ms}};
  add_reply_steps(run, "run", steps);
  add_reply_steps(cmp, "check", steps);
  r.evidence["profiled_steps_ms"] = std::move(steps);
}

void Verifier::check_kernel_profile(DeviceState& dev, CandidateResult& r, const Json& facts) {
  // The last trial's run was profiled (torch.profiler / CUPTI in the candidate process, over the
  // whole request: making the inputs, forward, the checksums); its outputs matched. The judge
  // takes off the kernels of its own steps besides forward on the same trial, and classifies the
  // rest against the @triton.jit names of its own audit (never names the candidate reports). The
  // last trial is fresh: no earlier request saw its inputs, so no answer was computed before.
  // A cross-check below Python: native code in the candidate's process could still tamper with it.
  const TrialInput& in = dev.trials.back();
  const std::string phase = fmt::format("run (kernel profile, trial {})", in.trial);
  if (!facts.is_object()) {
    r.verdict = Verdict::not_verified;
    r.message = fmt::format("{}: the profiled run's facts are missing", phase);
    return;
  }
  const Json names = r.evidence.contains("source_audit") ? r.evidence["source_audit"].value("kernels", Json::array())
                                                         : Json::array();
  Reply kc = judge_call(dev, Json{{"op", "kernel_check"}, {"kernel_names", names}, {"trial", in.trial},
                                  {"kernel_profile", facts.value("kernel_profile", Json(nullptr))},
                                  {"triton_launches", facts.value("triton_launches", Json(nullptr))}},
                        opts_.load_timeout_s);
  if (!kc.ok()) {
    r.verdict = Verdict::not_verified;
    r.message = fmt::format("the judge could not classify the kernel profile: {}: {}", kc.error_kind(), kc.error_message());
    return;
  }
  r.evidence["kernel_profile"] = kc.message.value("summary", Json::object());
  const Json v = kc.message.value("violation", Json(nullptr));
  if (v.is_object()) {
    r.verdict = Verdict::cheat;
    r.rule = v.value("rule", "no_triton_kernel");
    r.message = fmt::format("{}: {}", phase, v.value("evidence", ""));
    r.evidence["rule_evidence"] = v.value("evidence", "");
    r.evidence["phase"] = phase;
  }
}

void Verifier::run_trials(Worker& w, DeviceState& dev, CandidateResult& r, Json* profiled, std::optional<GpuUse>* held) {
  bool undiscriminating = false;
  Json trials = Json::array();
  for (size_t t = 0; t < dev.trials.size(); ++t) {
    const TrialInput& in = dev.trials[t];
    fs::path out = w.work_dir / fmt::format("out-{}.safetensors", t);
    // The first run also JIT-compiles the Triton kernels.
    double timeout = run_timeout_s(dev) + (t == 0 ? opts_.load_timeout_s : 0);
    const bool profile = profiled != nullptr && t + 1 == dev.trials.size();
    if (profile) timeout += opts_.load_timeout_s;  // CUPTI's start-up
    if (profile && held && opts_.timing) {
      // The reference's timing is ready before the profiled run: the calls per round trip and
      // its timing sets, made in the background from set-up on (by the problem's first candidate
      // to get here; the others find it done). The reference has no batch of its own: it is timed
      // round trip by round trip in each candidate's paired batch.
      const auto t_ref = Clock::now();
      ensure_reference_timing(dev, held);
      r.evidence["phases"]["reference_timing_ms"] = ms_since(t_ref);
    }
    const Reply run = run_on_trial(w, dev, in, out, timeout, profile, profile ? held : nullptr);
    // A failed run ends the candidate: the GPU is let go before its clean-up (the worker's exit
    // awaited, a health check of the GPU in a fresh process), which other work need not wait for.
    if (!run.ok() && held) held->reset();
    if (fail_from_reply(run, fmt::format("run (trial {})", t), timeout, w, dev, r)) {
      r.evidence["trial"] = t;
      return;
    }
    if (flood_from_cgroup(w, opts_.max_tasks, r)) {
      r.evidence["phase"] = fmt::format("run (trial {})", t);
      r.evidence["trial"] = t;
      return;
    }
    Json facts = run.message;
    facts.erase("ok");
    facts.erase("v");
    if (profile) *profiled = facts;
    Reply cmp;
    {
      // The judge's comparison (and its references, made when first needed) runs on the GPU:
      // under the exclusive hold the profiled run left, else a shared one.
      std::optional<GpuUse> busy;
      if (profile && held && *held) {
        (*held)->continue_as("profiled run's check");  // the comparison, then the kernel check
      } else {
        busy.emplace(dev, GpuGuard::Mode::shared, "compare", gpu_use_);
      }
      cmp = judge_call(dev, Json{{"op", "compare"}, {"trial", t}, {"outputs_file", out.string()}, {"candidate", w.id()},
                                 {"run_report", facts}, {"require_triton", true}},
                       opts_.load_timeout_s);
    }
    if (profile) note_profiled_steps(r, run, cmp);
    std::error_code ec;
    fs::remove(out, ec);
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
    // The size variants' judges start and load the problem (once per call, on a thread of
    // their own), ready for its multi-shape check; nothing is spent on them before.
    if (t == 0 && opts_.multishape && !dev.parent) start_variants();
    // The last trial's hint decides: the judge then weighs every element over all trials, so a
    // trial that tells an output from zeros (near_unit) clears the earlier ones' doubt.
    if (c.value("verdict_hint", "correct") == "undiscriminating") {
      r.evidence["baselines_passing"] = c.value("baselines_passing", Json());
      if (t + 1 == dev.trials.size()) {
        undiscriminating = true;
        r.message = c.value("message", "");
      }
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

}  // namespace kernelllm::harness
