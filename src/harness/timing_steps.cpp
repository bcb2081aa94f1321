// What is timed, and when (docs/verification.md, Timing): the reference readied once per device
// (its kernel time or a probe, its timing sets made under shared holds; no batch of its own), each
// correct candidate in a paired batch under the GPU's exclusive hold, which times the reference
// too, the whole-output check of its last round trip after that hold, and the untimed re-check of
// a set whose timed values were wrong. The clock itself, a batch of round trips, is
// timed_calls.cpp's timed_batch.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

namespace {

// The timing sets the judge makes in one request, under one shared hold (prepare_reference_sets).
constexpr int kPrepareChunkSets = 64;
// Calls of the reference profiled for its kernel time (reference_kernel_ms; their median), and as
// many launched unprofiled for its launch time (the least).
constexpr int kEstimateCalls = 5;

// A request for round trips [first, last)'s sets alone (no timer, no region: the batch makes
// those); `release`: the judge then gives back what its allocator cached for the requests before.
Json sets_request(const std::vector<TrialInput>& sets, int first, int last, int per, int final_trip, bool release) {
  Json req = reference_prepare_request(sets, first, last, per, false, final_trip);
  req["sets_only"] = true;
  req["release"] = release;
  return req;
}

}  // namespace

bool Verifier::prepare_reference_sets(DeviceState& dev, int iters, int per, const std::atomic<bool>* stop,
                                      bool whole_last) {
  // Making a set's references (inputs, fp32 and fp64 forwards, fingerprints, tolerance) costs up
  // to milliseconds a set, and a batch of a fast reference uses hundreds of sets: ~3 s a problem
  // on an H200 (with the accounting baseline and a cache release per set, since dropped), which
  // the exclusive hold used to pay while every other process of ours on the GPU waited. Made here
  // under shared holds of a few round trips' sets each, so that a timer waits for one of them at
  // most; the batch's own prepare then finds them made.
  const std::vector<TrialInput>& sets = timing_sets(dev);
  if (sets.empty()) return true;
  const int trips = warmup_calls(dev) + iters;
  const int chunk = std::max(1, kPrepareChunkSets / std::max(1, per));
  for (int first = 0; first < trips; first += chunk) {
    if (stopped(stop)) return false;
    const int last = std::min(trips, first + chunk);
    const auto busy = use_gpu(dev, GpuGuard::Mode::shared, "timing sets");
    const double timeout = std::max(opts_.timing_timeout_s, opts_.load_timeout_s * static_cast<double>(last - first) * per);
    Reply p = judge_call(dev, sets_request(sets, first, last, per, whole_last ? trips - 1 : -1, last == trips), timeout);
    if (!p.ok()) {
      warn(fmt::format("making the reference's timing sets on {} failed: {}: {}", dev.name, p.error_kind(), p.error_message()));
      return true;  // the batch makes what is missing itself (and fails the same way, reported there)
    }
  }
  return true;
}

int calls_per_trip_without_probe(bool cuda, size_t n_sets, int trips, uint64_t output_bytes) {
  // Every call a round trip can hold (its sets, the region), whatever the reference's time: on a
  // CPU, or with room for one call, what the probe would find.
  const int most = calls_per_trip_for(cuda, n_sets, trips, output_bytes, 0);
  return !cuda || most <= 1 ? most : 0;
}

std::optional<double> Verifier::reference_kernel_ms(DeviceState& dev, const std::atomic<bool>* stop) {
  // The first timing set made, and the reference's kernels profiled over a few calls of it, under
  // a shared hold: the profiler's kernel durations are the reference's own GPU time, which other
  // processes' work can only lengthen (so B can only come out smaller than on a quiet GPU), or
  // the host's time to launch them where that is longer (a reference of many small kernels).
  const std::vector<TrialInput>& sets = timing_sets(dev);
  if (sets.empty() || stopped(stop)) return std::nullopt;
  const auto busy = use_gpu(dev, GpuGuard::Mode::shared, "timing sets");
  Json req = sets_request(sets, 0, 1, 1, -1, false);
  req["estimate"] = kEstimateCalls;
  Reply p = judge_call(dev, req, std::max(opts_.timing_timeout_s, opts_.load_timeout_s));
  if (!p.ok() || !p.message.value("call_kernel_ms", Json()).is_number()) {
    log(fmt::format("the reference's kernel time on {} was not measured ({}); it is probed instead", dev.name,
                    p.ok() ? p.message.value("estimate_note", std::string("no answer")) : p.error_message()));
    return std::nullopt;
  }
  return p.message["call_kernel_ms"].get<double>();
}

bool Verifier::prepare_reference_timing(DeviceState& dev, const std::atomic<bool>* stop) {
  // The caller holds dev.ref_timing_mu. How many calls make a round trip for the reference and
  // every candidate (B) follows from the reference's time per call: on a GPU its kernels' time or
  // their launches', measured on the shared GPU (reference_kernel_ms); where that has no answer, a probe of
  // one call per round trip, a few round trips, under an exclusive taking of its own, whose CUDA
  // events say it (a batch of all `iters` for this took ~1 s of the GPU's exclusive time per call
  // on an H200). A reference slow enough for one call per round trip is then timed with all of them.
  if (dev.ref_prepared) return true;
  mark("reference_prepare_started");
  premake_profiled_trial(dev, stop);
  const int iters = timed_calls(dev);
  const int trips = iters + warmup_calls(dev);
  const std::vector<TrialInput>& sets = timing_sets(dev);
  constexpr int kProbeTrips = 5;
  // The probe (a taking of the GPU of its own, exclusive) only when its answer is not known
  // without it: the reference is then timed once, in its batch.
  const int known =
      sets.empty() ? 0 : calls_per_trip_without_probe(dev.cuda(), sets.size(), trips, sets.front().output_bytes);
  if (!dev.ref_probed && known > 0) {
    dev.ref_probed = true;
    dev.ref_batch_per = known;
    mark("reference_probe_skipped");
  }
  if (!dev.ref_probed && dev.cuda()) {
    // The probe's CUDA events span the host's launches too: for a kernel of microseconds they
    // measured mostly how busy the host's CPUs were (B of 20-64 for the same problem), and its
    // exclusive taking waited for every shared hold to end (21 of a throughput run's 53 drains).
    if (const std::optional<double> ms = reference_kernel_ms(dev, stop)) {
      dev.ref_probed = true;
      dev.ref_batch_per = calls_per_trip_for(true, sets.size(), trips, sets.front().output_bytes, *ms);
      mark("reference_probe_skipped");
      log(fmt::format("the reference takes {:.4f} ms a call on {} (its kernels, or their launches): {} calls a round trip", *ms, dev.name,
                      dev.ref_batch_per));
    } else if (stopped(stop)) {
      return false;
    }
  }
  if (!dev.ref_probed) {
    dev.calls_per_trip = 1;
    if (!prepare_reference_sets(dev, std::min(iters, kProbeTrips), 1, stop, /*whole_last=*/false)) return false;
    std::optional<TimingResult> probed;
    {
      if (stopped(stop)) return false;
      const auto lock = use_gpu(dev, GpuGuard::Mode::exclusive, "reference timing");
      if (stopped(stop)) return false;  // (stopped while waiting for the GPU: no probe nobody uses)
      probed = timed_batch(dev, nullptr, std::min(iters, kProbeTrips), false, nullptr, 1);
    }
    dev.ref_probed = true;
    dev.ref_batch_per = 0;
    if (probed) {
      // The reference's own CUDA-event time per call, measured in the trusted judge.
      const TimingResult& probe = *probed;
      const double ref_call_ms = probe.stats.n > 0 ? probe.event_total_ms / static_cast<double>(probe.stats.n) : 0;
      if (const int per = calls_per_trip_for(dev.cuda(), sets.size(), trips, sets.front().output_bytes, ref_call_ms);
          per > 1 || iters > kProbeTrips) {
        dev.ref_batch_per = per;
      }
    }
  }
  if (dev.ref_batch_per > 0 && !prepare_reference_sets(dev, iters, dev.ref_batch_per, stop)) return false;
  dev.ref_prepared = true;
  mark("reference_prepared");
  return true;
}

void Verifier::premake_profiled_trial(DeviceState& dev, const std::atomic<bool>* stop) {
  // The last trial's references (the profiled run's) made now, under a shared hold beside the
  // candidates' loads and trials, instead of by the comparison in the problem's first candidate's
  // exclusive taking (2.1-3.9 s of an H200 throughput run's exclusive holds). The judge's kernel
  // profile of that trial is still made under the taking, by the kernel check. A failure here
  // changes nothing: the comparison makes them, and reports why it could not.
  if (!dev.cuda() || dev.trials.empty() || stopped(stop)) return;
  const TrialInput& last = dev.trials.back();
  const auto lock = use_gpu(dev, GpuGuard::Mode::shared, "profiled trial's references");
  if (stopped(stop)) return;
  (void)judge_call(dev, Json{{"op", "make_inputs"}, {"trial", last.trial}, {"distribution", last.distribution}},
                   opts_.load_timeout_s);
}

bool Verifier::stopped(const std::atomic<bool>* stop) const {
  // A background preparation's stop, or the call's cancellation (the REPL's Ctrl+C).
  return stop && (stop->load() || (opts_.cancel && opts_.cancel->load()));
}

void Verifier::mark(const std::string& what) {
  // The first device's (or the first thread's) time of `what` in the report's timeline.
  std::lock_guard lock(ref_threads_mu_);
  report_.timeline_ms.emplace(what, ms_from_start());
}

void Verifier::start_reference_timing(DeviceState& dev) {
  // A candidate of the device was not answered from the cache: the reference's probe and timing
  // sets are made from now on, beside the candidates' loads and trials, instead of when the first
  // of them reaches its last trial, which then waited for them (10-20 s a problem of 8 at once on
  // an H200, mostly waiting for the GPU's lock; 7-14 s still when begun at a candidate's first
  // matched trial). It is timed in the candidates' paired batches.
  if (!opts_.timing || dev.parent) return;
  std::lock_guard lock(ref_threads_mu_);
  if (dev.ref_started || ref_stop_.load()) return;
  dev.ref_started = true;
  ref_threads_.emplace_back([this, &dev] {
    std::lock_guard once(dev.ref_timing_mu);
    if (!dev.ref_ready) prepare_reference_timing(dev, &ref_stop_);
  });
}

void Verifier::stop_reference_timing() {
  // No candidate is left to use what the background preparation makes; a finalist's re-timing
  // (select) makes what is missing itself.
  std::vector<std::thread> running;
  {
    std::lock_guard lock(ref_threads_mu_);
    ref_stop_ = true;
    running.swap(ref_threads_);
  }
  for (std::thread& t : running) t.join();
}

void Verifier::ensure_reference_timing(DeviceState& dev, std::optional<GpuUse>* held) {
  // Once per device, by whichever thread times first; the others wait here, holding no lock (as
  // the first waits for a preparation started in the background, start_reference_timing).
  std::lock_guard once(dev.ref_timing_mu);
  if (dev.ref_ready) return;
  prepare_reference_timing(dev, nullptr);
  // No batch of the reference's own: every candidate's batch times the reference round trip by
  // round trip beside its own; the device's first such batch to pass its whole-output check gives
  // the reference's published time (reference_from_paired), and its first measures the GPU's
  // idle flush. A batch of its own cost ~0.35 s of exclusive hold a problem (23 round trips of
  // ~10 ms of its work each) for the same numbers.
  if (dev.ref_batch_per > 0) dev.calls_per_trip = dev.ref_batch_per;  // (the probe answered, or was not needed)
  dev.ref_ready = true;
  if (opts_.time_compile) {
    std::optional<GpuUse> own;
    std::optional<GpuUse>& lock = held ? *held : own;
    lock.emplace(dev, GpuGuard::Mode::exclusive, "reference timing", gpu_use_);
    dev.compile_timing = timed_batch(dev, nullptr, timed_calls(dev), true, nullptr);
  }
}

void Verifier::ensure_load_baselines(DeviceState& dev, int iters) {
  // Select's finalists make their own sets (unpaired batches), each round trip's load clocked
  // against the judge's making of the same sets. The reference's batches copy the sets the judge
  // kept, so the judge makes them from their seeds here, once: a reference batch of the finalists'
  // round trips, its times not published.
  if (static_cast<int>(dev.load_baseline_ms.size()) >= warmup_calls(dev) + iters) return;
  const auto lock = use_gpu(dev, GpuGuard::Mode::exclusive, "re-timing");
  (void)timed_batch(dev, nullptr, iters, false, nullptr, 0, false, /*fresh_loads=*/true);
}

void Verifier::recheck_timing_set(Worker& w, DeviceState& dev, CandidateResult& r) {
  // A timed call's values were wrong. Was the work skipped when timed (a cheat), or is the kernel
  // simply wrong on that input set (an honest bug the correctness trials did not hit, e.g. an
  // error near the tolerance that other inputs show)? The same set once more as an untimed run,
  // compared in full: wrong there too is that run's own verdict (wrong_output, with the first
  // mismatch), right there is timed_output_mismatch. So a borderline kernel gets the same verdict
  // in every run, whichever set shows its error first.
  const int k = r.evidence.value("timed_mismatch_set", -1);
  r.evidence.erase("timed_mismatch_set");
  const std::vector<TrialInput>& sets = timing_sets(dev);
  if (k < 0 || static_cast<size_t>(k) >= sets.size()) return;
  const TrialInput& in = sets[static_cast<size_t>(k)];
  const std::string finding = r.message;
  const fs::path out = w.work_dir / "out-timing-recheck.safetensors";
  const double timeout = run_timeout_s(dev);
  const Reply run = run_on_trial(w, dev, in, out, timeout, false);
  const std::string phase = fmt::format("run (untimed re-check of timing set {}, trial {})", k, in.trial);
  if (fail_from_reply(run, phase, timeout, w, dev, r)) return;
  Json facts = run.message;
  facts.erase("ok");
  facts.erase("v");
  Reply cmp = judge_call(dev, Json{{"op", "compare"}, {"trial", in.trial}, {"outputs_file", out.string()}, {"candidate", w.id()},
                                   {"run_report", facts}, {"require_triton", true}},
                         opts_.load_timeout_s);
  std::error_code ec;
  fs::remove(out, ec);
  if (!cmp.ok()) return;  // the timed finding stands
  r.evidence["timing_recheck"] = Json{{"set", k}, {"trial", in.trial}, {"untimed_match", cmp.message.value("match", false)}};
  if (cmp.message.value("match", false)) {
    r.message = finding + "; an untimed run on the same inputs is right, so the timed calls did less work";
    return;
  }
  const Json& c = cmp.message;
  r.verdict = verdict_from_name(c.value("verdict_hint", "wrong_output")).value_or(Verdict::wrong_output);
  r.rule = c.value("rule", Json(nullptr)).is_string() ? c["rule"].get<std::string>() : "";
  r.message = fmt::format("wrong on timing set {} (trial {}, {} inputs), in a timed call and untimed: {}", k, in.trial,
                          in.distribution, c.value("message", ""));
  for (const char* key : {"violations", "evidence", "first_mismatch", "stats"}) {
    if (c.contains(key)) r.evidence[key] = c[key];
  }
  r.evidence["phase"] = phase;
}

bool Verifier::check_whole_after(DeviceState& dev, Worker& w, CandidateResult& r, const WholeCheckAfter& whole) {
  const auto busy = use_gpu(dev, GpuGuard::Mode::shared, "timing's whole check");
  const std::vector<TrialInput>& sets = timing_sets(dev);
  Json trials = Json::array();
  for (size_t k : whole.sets) trials.push_back(sets[k].trial);
  Reply full = judge_call(dev, Json{{"op", "check_timed"}, {"trials", trials}, {"full", true}, {"snapshot", true},
                                    {"candidate", w.id()}},
                          opts_.load_timeout_s);
  if (full.ok() && full.message.value("match", false)) return true;
  // A batch that ends in the candidate's own verdict leaves no baseline (KeptIfComplete): the one
  // this batch set is dropped, unless another batch has set its own since.
  if (double mine = whole.baseline_set_ms; mine > 0) (void)dev.flush_baseline_ms.compare_exchange_strong(mine, 0.0);
  if (!full.ok()) {
    whole_check_failed(r, full);
    return false;
  }
  const int slot = std::clamp(full.message.value("slot", 0), 0, static_cast<int>(whole.sets.size()) - 1);
  timed_mismatch(r, whole.first_call + slot, sets, whole.sets[static_cast<size_t>(slot)], full);
  r.evidence["timed_mismatch_check"] = "whole outputs, after the exclusive hold";
  return false;
}

void Verifier::time_candidate(Worker& w, DeviceState& dev, CandidateResult& r, std::optional<GpuUse>* held) {
  std::optional<TimingResult> t;
  WholeCheckAfter whole;
  {
    // Nothing else of ours runs on this GPU meanwhile (correctness runs hold it shared): the hold
    // the profiled run left (run_trials readied the reference before it), else one taken now, the
    // reference readied first.
    std::optional<GpuUse> own;
    std::optional<GpuUse>& lock = held ? *held : own;
    if (!lock) ensure_reference_timing(dev, &lock);
    if (lock) {
      lock->continue_as("timing");
      r.evidence["phases"]["timing_wait_ms"] = 0.0;
    } else {
      lock.emplace(dev, GpuGuard::Mode::exclusive, "timing", gpu_use_);
      r.evidence["phases"]["timing_wait_ms"] = lock->wait_ms();
    }
    mark("first_timed_batch");
    // The whole-output check of the last round trip comes after the hold (on the judge's copy).
    t = timed_batch(dev, &w, timed_calls(dev), false, &r, 0, /*paired=*/true, false, &whole);
    lock.reset();
  }
  if (t && whole.pending) {
    using std::chrono::steady_clock;
    const auto t_whole = steady_clock::now();
    if (!check_whole_after(dev, w, r, whole)) t.reset();
    r.evidence["phases"]["timing_whole_check_ms"] =
        std::chrono::duration<double, std::milli>(steady_clock::now() - t_whole).count();
  }
  // The device's first paired batch to pass is the reference's published timing.
  if (t && !t->paired_ref_ms.empty()) {
    std::lock_guard published(dev.ref_timing_set_mu);
    if (!dev.ref_timing) dev.ref_timing = reference_from_paired(*t, r.path);
  }
  if (!t) {  // r holds the verdict
    if (r.evidence.contains("timed_mismatch_set")) recheck_timing_set(w, dev, r);  // outside the timing lock
    return;
  }
  // A median that does not repeat within its own noise is published with the flag, never
  // silently. Not timed again in this worker: it has seen these timing sets and could replay
  // answers it kept from the first batch.
  r.timing = *t;
  std::optional<TimingResult> ref;
  {
    std::lock_guard published(dev.ref_timing_set_mu);
    ref = dev.ref_timing;
  }
  // The speedup is the median of the round trips' paired ratios: a machine that slows for a while
  // (measured: the same process's calls 1.6x slower for several round trips running) slows both
  // sides of a ratio, where a reference timed once per problem set against a candidate timed
  // minutes later turned that drift into speedups 2x apart from run to run.
  const TimingStats paired = timing_stats(paired_speedups(*t));
  if (dev.cuda() && paired.n > 0) {
    r.speedup = paired.median_ms;
  } else {
    r.speedup = dev.cuda() && ref && t->stats.median_ms > 0 ? ref->stats.median_ms / t->stats.median_ms : 0.0;
  }
  r.evidence["timing_unstable"] = dev.cuda() && timing_unstable(*t);
  if (!dev.cuda()) return;
  const TrialInput& in = timing_sets(dev).front();
  const uint64_t bytes = in.input_bytes + in.output_bytes;
  const double peak = opts_.peak_bandwidth_gbs > 0 ? opts_.peak_bandwidth_gbs : peak_bandwidth_for(dev.hardware);
  const double floor_ms = roofline_floor_ms(bytes, peak);
  r.evidence["roofline_floor_ms"] = floor_ms;
  if (std::string why = roofline_violation(*t, floor_ms, bytes, peak); !why.empty()) {
    r.verdict = Verdict::cheat;
    r.rule = "timing_implausible";
    r.message = why;
  }
}

}  // namespace kernelllm::harness
