// Timing clocked by the orchestrator (docs/verification.md, Timing). A worker cannot be trusted
// with a clock: it may patch timers, forge replies or skip work. So per round trip of timed calls
// we send `time_call`, in which the worker runs each call on its own input set and copies its
// outputs into its own slot of an output region the judge owns (shared with this candidate only,
// through fd 5), then `check_timed`, in which the judge (trusted) reads the values of every slot
// there, and measure both round trips here. Several calls per round trip (for kernels of
// microseconds) keep the round trips' fixed cost a small share of each published time. The judge also flushes the
// GPU's shared L2 between round trips. The reference is timed by the same loop on the judge, copying
// into and checking a region of its own, so both sides pay the same overheads: round trip by round
// trip beside each candidate's, on the same sets, for the candidate's speedup (the device's first
// such batch is also its published timing); a batch of its own only for a probe, torch.compile and
// select's load baselines.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "gpu_lock.h"
#include "verifier.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

namespace {

constexpr int kPings = 7;

// A candidate's process stopped between its timed round trips, continued for each (and at the
// end, whatever path leaves the batch).
struct PausedWhileIdle {
  Process* proc;
  bool held = false, ever = false;
  // False when a thread of the candidate is still running at the deadline (stuck in a system
  // call that SIGSTOP waits for): nothing of the judge's may run beside it on the timing CPU.
  bool stop() {
    if (proc && !held) held = ever = proc->pause();
    return !held || proc->wait_stopped(deadline_in(kStopWaitS));
  }
  void go() {
    if (proc && held) proc->resume();
    held = false;
  }
  ~PausedWhileIdle() { go(); }
  static constexpr double kStopWaitS = 2;
};

// How long the flushes around a paired candidate's round trip may wait for an idle GPU: after it,
// the reference's round trip then runs anyway (the wait charged to the candidate); before it, the
// candidate goes untimed.
constexpr double kSettleS = 2;

// The idle flush baseline a reference batch measures is capped at this multiple of the quickest
// flush at set-up plus this much (flush_floor_ms): lenient for the judge pinned to a shared timing
// CPU, well under the time slice (a few ms) that GPU work kept queued would raise it to.
constexpr double kFloorCapFactor = 3, kFloorCapMs = 0.5;

// Flushes that measure the idle baseline at the start of a device's first paired batch.
constexpr int kBaselineFlushes = 9;

// A flush's wait beyond its idle baseline that is noise, not queued work: never charged, and a
// flush under baseline + this finds the GPU idle.
double flush_margin_ms(double baseline_ms) { return std::max(0.1, 0.5 * baseline_ms); }

// A batch's round trips on one CPU: this thread, the judge and the candidate are pinned to it,
// so that the candidate's and the reference's launch overheads are paid on the same core (on a
// host whose cores run at different speeds, a process's per-call time follows the core it landed
// on: docs/verification.md, Timing). Each gets its CPUs back at the end (the candidate's process
// runs its multi-shape check after its timing).
struct PinnedToCpu {
  int cpu = -1;      // -1: not pinned
  std::string note;  // why not, when asked
  std::vector<int> thread_was, judge_was, cand_was;
  Process* judge = nullptr;
  Process* cand = nullptr;

  PinnedToCpu(int want, Process* judge_proc, Process* cand_proc) {
    if (want < 0) return;
    const std::vector<int> one{want};
    thread_was = allowed_cpus(0);
    Status s = set_allowed_cpus(0, one);
    if (s.ok() && judge_proc) {
      judge = judge_proc;
      judge_was = allowed_cpus(judge_proc->pid());
      s = judge_proc->pin_cpus(one);
    }
    if (s.ok() && cand_proc) {
      cand = cand_proc;
      cand_was = allowed_cpus(cand_proc->pid());
      s = cand_proc->pin_cpus(one);
    }
    if (!s.ok()) {
      note = s.message();
      release();
      return;
    }
    cpu = want;
  }
  void release() {
    if (judge && !judge_was.empty()) (void)judge->pin_cpus(judge_was);
    if (cand && !cand_was.empty() && cand->running()) (void)cand->pin_cpus(cand_was);
    if (!thread_was.empty()) (void)set_allowed_cpus(0, thread_was);
    judge = cand = nullptr;
    thread_was.clear();
  }
  ~PinnedToCpu() { release(); }
};

}  // namespace

double capped_flush_baseline(double median_ms, double floor_ms) {
  return floor_ms > 0 ? std::min(median_ms, kFloorCapFactor * floor_ms + kFloorCapMs) : median_ms;
}

void timed_mismatch(CandidateResult& r, int call, const std::vector<TrialInput>& sets, size_t k, const Reply& full) {
  r.verdict = Verdict::cheat;
  r.rule = "timed_output_mismatch";
  r.message = fmt::format("timed call {} (inputs of trial {}) left wrong values in the output region, so it skipped, "
                          "replayed or put off work: {}",
                          call, sets[k].trial, full.message.value("message", ""));
  r.evidence["timed_mismatch_set"] = static_cast<int>(k);
}

void whole_check_failed(CandidateResult& r, const Reply& full) {
  r.verdict = Verdict::not_verified;
  r.message = fmt::format("the judge could not compare the last timed output: {}: {}", full.error_kind(),
                          full.error_message());
}

const std::vector<TrialInput>& timing_sets(const DeviceState& dev) {
  return dev.timing_inputs.empty() ? dev.trials : dev.timing_inputs;
}

int Verifier::timing_cpu(const DeviceState& dev) const {
  const std::vector<int> allowed = allowed_cpus(::getpid());
  if (allowed.empty() || opts_.timing_cpu == kTimingCpuOff) return -1;
  if (opts_.timing_cpu >= 0) {
    return std::find(allowed.begin(), allowed.end(), opts_.timing_cpu) != allowed.end() ? opts_.timing_cpu : -1;
  }
  const DeviceState& root = dev.root();
  if (!root.cuda()) return -1;
  // The physical GPU (CUDA_VISIBLE_DEVICES mapped), so that processes shown different GPUs as
  // cuda:0 pick different CPUs; a UUID picks by its hash.
  const std::string id = physical_gpu_id(root.name);
  char* end = nullptr;
  const unsigned long n = std::strtoul(id.c_str(), &end, 10);
  const size_t ordinal = !id.empty() && end && *end == '\0' ? n : std::hash<std::string>{}(id);
  return allowed[allowed.size() - 1 - ordinal % allowed.size()];
}

std::vector<double> published_call_times(const std::vector<CallClock>& calls, double ping_ms, double flush_baseline_ms,
                                         double* excess_ms, double* check_excess_ms) {
  std::vector<double> out;
  double charged = 0;
  for (const CallClock& c : calls) {
    // The check's own cost (the same values read and compared for the reference: its work depends
    // on the profile's tolerances) is not the candidate's; only what its check took beyond the
    // reference's of the same sets is: work the candidate finished after its reply.
    const double check = c.check_baseline_ms >= 0 ? c.check_ms - c.check_baseline_ms : c.check_ms - ping_ms;
    if (check_excess_ms && c.check_baseline_ms >= 0 && check > 0) *check_excess_ms += check;
    double t = c.call_ms - ping_ms + check + c.load_excess_ms;
    const double wait = c.next_flush_ms - flush_baseline_ms;
    // Only the part beyond the threshold: charging all of a wait just above it made an honest
    // round trip's time jump by the whole wait, a cliff that turned scheduling noise into spread.
    if (const double over = wait - flush_margin_ms(flush_baseline_ms); c.next_flush_ms > 0 && over > 0) {
      t += over;
      charged += over;
    }
    out.push_back(std::max(t / std::max(1, c.calls), 1e-6));
  }
  if (excess_ms) *excess_ms += charged;
  return out;
}

std::string roofline_violation(const TimingResult& t, double floor_ms, uint64_t bytes, double peak_gbs) {
  if (t.stats.median_ms >= floor_ms) return "";
  return fmt::format("median {:.5f} ms is below the roofline floor {:.5f} ms ({} bytes at {:.0f} GB/s)", t.stats.median_ms,
                     floor_ms, bytes, peak_gbs);
}

TimingResult reference_from_paired(const TimingResult& t, const std::string& candidate) {
  TimingResult ref;
  ref.meaningful = t.meaningful;
  ref.times_ms = t.paired_ref_ms;
  ref.stats = timing_stats(ref.times_ms);
  ref.ping_ms = t.ping_ms;
  ref.calls_per_trip = t.calls_per_trip;
  ref.warmup_trips = t.warmup_trips;
  ref.load_ms = t.paired_load_ms;
  ref.flush_median_ms = t.flush_median_ms;
  ref.flush_floor_ms = t.flush_floor_ms;
  ref.flush_baseline_ms = t.flush_baseline_ms;
  ref.cpu = t.cpu;
  ref.cpu_note = t.cpu_note;
  ref.paired_with = candidate;
  return ref;
}

std::vector<double> paired_speedups(const TimingResult& t) {
  std::vector<double> out;
  if (t.paired_ref_ms.size() != t.times_ms.size()) return out;
  for (size_t i = 0; i < t.times_ms.size(); ++i) out.push_back(t.paired_ref_ms[i] / std::max(t.times_ms[i], 1e-9));
  return out;
}

bool timing_unstable(const TimingResult& t) {
  if (t.stats.n >= 4 && t.stats.iqr_ms() > 0.5 * t.stats.median_ms) return true;
  const TimingStats s = timing_stats(paired_speedups(t));
  return s.n >= 4 && s.iqr_ms() > 0.5 * s.median_ms;
}

// The judge's time_prepare for round trips [first, last) of a reference batch of `per` calls
// per round trip: the sets they use (call j of round trip i on set (i * per + j) mod the sets, as
// in timed_batch) and, with several calls per round trip, each round trip's sets together.
Json reference_prepare_request(const std::vector<TrialInput>& sets, int first, int last, int per, bool compile,
                               int final_trip) {
  Json trials = Json::array(), groups = Json::array(), whole = Json::array();
  std::vector<bool> seen(sets.size(), false);
  for (int i = first; i < last; ++i) {
    Json g = Json::array();
    for (int j = 0; j < per; ++j) {
      const size_t k = static_cast<size_t>(i * per + j) % sets.size();
      if (!seen[k]) trials.push_back(sets[k].trial);
      seen[k] = true;
      g.push_back(sets[k].trial);
    }
    if (per > 1) groups.push_back(std::move(g));
  }
  // The batch's last round trip's sets: their whole outputs are compared after it, so the judge
  // keeps their whole references (of the other sets, their fingerprints only). None for a batch
  // without a candidate's whole compare (final_trip < 0).
  for (int j = 0; final_trip >= 0 && j < per; ++j) {
    whole.push_back(sets[static_cast<size_t>(final_trip * per + j) % sets.size()].trial);
  }
  return Json{{"op", "time_prepare"}, {"compile", compile}, {"trial", sets.front().trial},
              {"slots", per},         {"trials", std::move(trials)}, {"trips", std::move(groups)},
              {"keep_whole", std::move(whole)}};
}

std::optional<TimingResult> Verifier::timed_batch(DeviceState& dev, Worker* cand, int iters, bool compile, CandidateResult* r,
                                                  int per_trip, bool paired, bool fresh_loads, WholeCheckAfter* whole_after) {
  const bool cuda = dev.cuda();
  paired = paired && cand && !compile;
  const std::vector<TrialInput>& sets = timing_sets(dev);
  const int per = std::max(1, per_trip > 0 ? per_trip : dev.calls_per_trip);
  const int warmup = warmup_calls(dev);
  const int trips = warmup + iters;  // at most; fewer within the budget (timed_trips_done)
  // Call j of round trip i runs on set (i * per + j) mod the sets: each its own set while they last.
  auto set_of = [&](int trip, int j) { return static_cast<size_t>(trip * per + j) % sets.size(); };
  const auto t_batch = Clock::now();
  const double timeout = opts_.timing_timeout_s;  // per round trip: B is chosen so a round trip holds ~5 ms of the reference
  auto ask = [&](const Json& req) { return cand ? cand->request(req, timeout) : judge_call(dev, req, timeout); };
  auto failed = [&](const Reply& rep, const std::string& phase) -> std::optional<TimingResult> {
    if (cand) {
      if (!fail_from_reply(rep, phase, timeout, *cand, dev, *r)) {
        r->verdict = Verdict::crash;
        r->message = "malformed reply during " + phase;
      }
    } else {
      warn(fmt::format("{}reference timing on {} failed during {}: {}: {}", compile ? "torch.compile " : "", dev.name, phase,
                       rep.error_kind(), rep.error_message()));
    }
    return std::nullopt;
  };
  // The output region, one slot per call of a round trip: the judge's own for the reference, else
  // a fresh one shared with this candidate alone (a region handed to an earlier candidate is
  // released by the judge).
  Json prepare{{"op", "time_prepare"}, {"compile", compile}, {"trial", sets.front().trial}, {"slots", per}};
  // The judge makes the references and checkers of every set the batch uses, and the tolerances
  // of each round trip's calls, before the clock starts (else the reference's clocked checks
  // would build them and the candidates' would find them made). The reference's batches find
  // them made already (prepare_reference_sets, outside the exclusive hold).
  auto reference_prepare = [&]() { return reference_prepare_request(sets, 0, trips, per, compile, trips - 1); };
  // The reference's prepare makes every set's references: the deadline of one check per set.
  const double prepare_timeout = std::max(timeout, opts_.load_timeout_s * static_cast<double>(sets.size()));
  // A paired batch's judge-side failure: not the candidate's doing.
  auto judge_failed = [&](const Reply& rep, const std::string& what) -> std::optional<TimingResult> {
    r->verdict = Verdict::not_verified;
    r->message = fmt::format("the judge could not {}: {}: {}", what, rep.error_kind(), rep.error_message());
    return std::nullopt;
  };
  // No time published, the verdict left as the trials gave it, and why in the evidence and message.
  auto not_taken = [&](const std::string& why) -> std::optional<TimingResult> {
    r->evidence["timing_not_taken"] = why;
    r->message += (r->message.empty() ? "" : "; ") + why;
    return std::nullopt;
  };
  // The reference's side of a paired batch failed (its sets' preparation, its round trip or its
  // check: a reference that cannot be timed on these sets, or a judge in trouble): not the
  // candidate's doing, and nothing to compare its time with, so none is published and its verdict
  // stays the trials' (as when the reference's own batch failed, before it had none).
  auto reference_failed = [&](const Reply& rep, const std::string& what) -> std::optional<TimingResult> {
    warn(fmt::format("reference timing on {} failed beside {}: {}: {}: {}", dev.name, r->path, what, rep.error_kind(),
                     rep.error_message()));
    return not_taken(fmt::format("not timed: the reference's paired round trip failed ({}: {})", what,
                                 rep.error_message().substr(0, 300)));
  };
  bool given = false;      // the candidate's inputs come in the judge's input region
  std::string inputs_note;  // else why not (paired batches)
  Json ref_given;           // given: the reference's own input slots (its time_load indices), one per call
  if (paired) {
    // The reference again, round trip by round trip beside this candidate's (its sets made anew,
    // so its loads are this batch's load baseline).
    Reply rp = judge_call(dev, reference_prepare(), prepare_timeout);
    if (!rp.ok()) return reference_failed(rp, "the preparation of its sets");
  }
  if (cand) {
    int fd = -1;
    Reply reg = judge_call(dev, Json{{"op", "time_region"}, {"trial", sets.front().trial}, {"slots", per}}, opts_.load_timeout_s,
                           &fd);
    if (!reg.ok()) {
      r->verdict = Verdict::not_verified;
      r->message = fmt::format("the judge could not make the timed calls' output region: {}: {}", reg.error_kind(),
                               reg.error_message());
      return std::nullopt;
    }
    Status sent = cand->proc.send_fd(fd, deadline_in(10));
    ::close(fd);
    if (!sent.ok()) {
      r->verdict = Verdict::crash;
      r->message = "the candidate's process did not take the output region's descriptor: " + sent.message();
      return std::nullopt;
    }
    prepare["region"] = reg.message.value("region", Json(nullptr));
    if (paired) {
      // The inputs too, in a region of the judge's that it fills before each round trip, so the
      // candidate makes nothing between round trips (docs/trust-boundary.md, Times). Sets that
      // cannot travel that way (not all plain contiguous tensors) are made by the candidate.
      int in_fd = -1;
      Reply in = judge_call(dev, Json{{"op", "time_inputs_region"}, {"trial", sets.front().trial}, {"slots", per}},
                            opts_.load_timeout_s, &in_fd);
      if (in.ok()) {
        Status sent_in = cand->proc.send_fd(in_fd, deadline_in(10));
        ::close(in_fd);
        if (!sent_in.ok()) {
          r->verdict = Verdict::crash;
          r->message = "the candidate's process did not take the input region's descriptor: " + sent_in.message();
          return std::nullopt;
        }
        prepare["region"]["inputs"] = in.message.value("inputs", Json(nullptr));
        ref_given = in.message.value("reference_sets", Json(nullptr));
        if (!ref_given.is_array() || ref_given.size() != static_cast<size_t>(per) ||
            !std::all_of(ref_given.begin(), ref_given.end(), [](const Json& x) { return x.is_number_integer(); })) {
          in.status = ReceiveStatus::protocol_error;
          in.error = fmt::format("time_inputs_region reply without a list of {} integer 'reference_sets'", per);
          return judge_failed(in, "make the timed calls' input region");
        }
        given = true;
      } else if (in.error_kind() != "unsupported") {
        return judge_failed(in, "make the timed calls' input region");
      } else {
        inputs_note = in.error_message();
      }
    }
  } else {
    prepare = reference_prepare();
  }
  Reply p = cand ? ask(prepare) : judge_call(dev, prepare, prepare_timeout);
  if (!p.ok()) return failed(p, "timing (preparing)");
  std::vector<Json> given_sets;  // the candidate's own indices of the input region's slots
  if (given) {
    const Json g = p.message.value("given", Json::array());
    if (!g.is_array() || g.size() != static_cast<size_t>(per) ||
        !std::all_of(g.begin(), g.end(), [](const Json& x) { return x.is_number_integer(); })) {
      r->verdict = Verdict::crash;
      r->message = fmt::format("malformed reply during timing (preparing): no list of {} 'given' sets", per);
      return std::nullopt;
    }
    given_sets.assign(g.begin(), g.end());
  }
  // Between its own round trips a paired candidate's process is stopped: no thread of it can
  // work on inputs it was handed, or slow the reference's round trips down.
  PausedWhileIdle idle{paired ? &cand->proc : nullptr};
  // A candidate that does not stop: its threads would run beside the judge's round trips.
  auto not_stopped = [&]() -> std::optional<TimingResult> {
    r->verdict = Verdict::timeout;
    r->message = fmt::format("a thread of the candidate's process was still running {:g} s after it was stopped between "
                             "its timed round trips (SIGSTOP waits for a system call to end)",
                             PausedWhileIdle::kStopWaitS);
    return std::nullopt;
  };
  if (!idle.stop()) return not_stopped();
  // A timing set's seed reaches the worker right before its round trip, never earlier, so no
  // call's answer can be worked out ahead in bulk. A round trip's new sets are made in one
  // request, clocked against the judge's load of the same sets (made from their seeds: just before
  // in a paired batch, else by ensure_load_baselines, round trip by round trip), and the excess is
  // charged to that round trip (work done while loading). The margin's 0.2 ms floor is per round
  // trip (shared by its calls); its quarter of the judge's load grows with the sets loaded
  // (docs/trust-boundary.md, Times).
  std::vector<Json> loaded(sets.size()), ref_loaded(paired ? sets.size() : 0);
  // The reference's own batch makes its sets from their seeds only when they are to be the load
  // baselines of unpaired candidate batches (select's finalists, which make their own sets):
  // otherwise it copies the sets the judge kept as made, as a paired batch does. Making them cost
  // 0.3-2 ms a set on an H200 beside 8 problems, 5.9 s of the exclusive holds of a throughput run.
  const bool baselines = !cand && fresh_loads;
  if (baselines) dev.load_baseline_ms.assign(static_cast<size_t>(trips), 0.0);
  // Loads sets `ks` into the candidate (`on_judge` false) or the judge, into `into`; a
  // candidate's load beyond `base` (the judge's load of the same sets) is added to *excess_ms.
  auto load = [&](bool on_judge, const std::vector<size_t>& ks, std::vector<Json>& into, double base,
                  double* excess_ms) -> Reply {
    // (The candidate makes no probe set for a timing set, whatever `probe` says.)
    Json which = Json::array();
    for (size_t k : ks) which.push_back(on_judge ? Json(sets[k].trial) : sets[k].spec());
    Json req{{"op", "time_load"}, {on_judge ? "trials" : "inputs", which}};
    // The reference's own batch, no baselines made: no candidate load is clocked against the
    // judge's, which may copy sets it made for an earlier batch instead of making them again.
    if (on_judge && !cand && !baselines) req["reuse"] = true;
    Reply l = on_judge ? judge_call(dev, req, timeout) : cand->request(req, timeout);
    if (l.ok() && !on_judge && base > 0) {
      // The part beyond the margin (as for the flush wait): work under it hid before too.
      const double over = l.elapsed_ms - base - std::max(0.2, 0.25 * base);
      if (over > 0) *excess_ms += over;
    }
    const Json got = l.message.value("sets", Json::array());  // integers where present (reply_shape_error)
    if (l.ok() && got.size() != ks.size()) {
      l.status = ReceiveStatus::protocol_error;
      l.error = fmt::format("time_load reply without a list of {} integer 'sets'", ks.size());
    }
    if (l.ok()) {
      for (size_t n = 0; n < ks.size(); ++n) into[ks[n]] = got[n];
    }
    return l;
  };
  // Every side of the round trips on one CPU from here on (the candidate stopped while it is
  // pinned, when paired), the pings included.
  const int cpu = timing_cpu(dev);
  PinnedToCpu pin(cpu, dev.judge ? &dev.judge->proc : nullptr, cand ? &cand->proc : nullptr);
  if (cpu < 0 && opts_.timing_cpu >= 0) pin.note = fmt::format("CPU {} is not one this process may run on", opts_.timing_cpu);
  // The fixed cost of one request (framing, JSON, Python dispatch) on the trusted side.
  std::vector<double> pings;
  for (int k = 0; k < kPings; ++k) {
    Reply q = judge_call(dev, Json{{"op", "ping"}}, 10);
    if (q.ok()) pings.push_back(q.elapsed_ms);
  }
  const double ping_ms = pings.empty() ? 0 : timing_stats(pings).median_ms;
  auto flush = [&]() -> double {
    if (!cuda) return 0;
    Reply f = judge_call(dev, Json{{"op", "l2_flush"}}, 60);
    return f.ok() ? f.elapsed_ms : 0;
  };
  // The flush, then again until one comes in under the threshold that published_call_times
  // charges beyond, or kSettleS pass; what each later flush took beyond the baseline is added to
  // what it returns (the first flush's time). The judge's synchronize waits for the judge's own
  // context only, and the GPU's scheduler gives another context's queued work a time slice at a
  // time, so one flush waits for at most about a slice of it. After a paired candidate's round
  // trip, the work it left queued past its reply would then run beside the reference's round trip
  // and slow it (an H200: a 3.0x speedup published for a 0.45x candidate, docs/trust-boundary.md);
  // waited out instead, and charged to the candidate. *clean: whether the last flush was under it.
  int flush_repeats = 0;
  auto settle = [&](bool* clean_out) -> double {
    double charged = flush();
    const double base = dev.flush_baseline_ms;
    const double threshold = base + flush_margin_ms(base);
    const auto until = Clock::now() + std::chrono::duration<double>(kSettleS);
    double f = charged;
    while (base > 0 && f > threshold && Clock::now() < until) {
      f = flush();
      charged += std::max(0.0, f - base);
      ++flush_repeats;
    }
    if (clean_out) *clean_out = base <= 0 || f <= threshold;
    return charged;
  };
  // Before a paired candidate's round trip (the candidate stopped, what it left queued before
  // waited out): a GPU still busy is another process's work, waited out charged to no one. Busy
  // through kSettleS, the GPU is not this batch's to time on: no time is published (the verdict
  // stays what the correctness trials gave), never one taken beside someone else's work.
  auto gpu_busy = [&]() -> std::optional<TimingResult> {
    return not_taken(fmt::format("not timed: the GPU stayed busy for {:g} s with work the judge could not wait "
                                 "out before a timed round trip, the candidate stopped (another process's, or "
                                 "what the candidate left queued past an earlier reply)", kSettleS));
  };
  // An unpaired candidate batch (finalists re-timed) starts with the GPU idle of what the finalist
  // before it left queued, charged to no one; a paired one waits before each of its round trips.
  // A finalist stopped with seconds of GPU work queued would otherwise run it beside a rival's
  // round trips and be chosen over it (red team): busy for kSettleS, this batch is not taken and
  // its round counts for no finalist (select.cpp).
  if (cand && cuda && !paired) {
    bool idle_gpu = true;
    (void)settle(&idle_gpu);
    if (!idle_gpu) return gpu_busy();
  }
  // The GPU's idle flush on this device, when no batch has measured it yet (the device's first
  // paired batch: the reference has no batch of its own): its median over kBaselineFlushes, the
  // candidate stopped, capped by the quickest at set-up as a reference batch's is (work the
  // candidate left queued cannot raise it past the cap).
  double baseline_median_ms = 0;
  if (paired && cuda && dev.flush_baseline_ms <= 0) {
    std::vector<double> idle_flushes;
    for (int k = 0; k < kBaselineFlushes; ++k) {
      if (const double f = flush(); f > 0) idle_flushes.push_back(f);
    }
    if (idle_flushes.empty()) {
      return not_taken("not timed: the judge's L2 flush failed, so the GPU's idle baseline that charges a candidate's "
                       "leftover work is unknown");
    }
    baseline_median_ms = timing_stats(idle_flushes).median_ms;
    dev.flush_baseline_ms = capped_flush_baseline(baseline_median_ms, dev.flush_floor_ms);
  }
  // Kept for the device's later batches only when this one completes: a candidate whose batch ends
  // in a verdict of its own (a cheat, a crash) or untimed does not leave a baseline it may have
  // raised with work it queued before (the next candidate measures it again).
  struct KeptIfComplete {
    DeviceState& dev;
    bool measured, complete = false;
    ~KeptIfComplete() {
      if (measured && !complete) dev.flush_baseline_ms = 0;
    }
  } baseline_kept{dev, baseline_median_ms > 0};
  std::vector<CallClock> calls, ref_calls;
  std::vector<double> flushes, loads, ref_loads;
  double events_ms = 0, load_excess_ms = 0;
  // Round trips [0, warm) are the warmup. A slow round trip ends the warmup, and the timed ones
  // stop within the budget (kSlowTripMs, timed_trips_done).
  int warm = warmup;
  double timed_ms = 0;
  // Where the round trips' time goes, step by step, summed over the batch (warmup included): what
  // the exclusive hold pays besides the timed calls themselves (TimingResult::trip_steps_ms).
  std::map<std::string, double> steps;
  auto t_step = Clock::now();
  auto step = [&](const char* name) {
    const auto now = Clock::now();
    steps[name] += std::chrono::duration<double, std::milli>(now - t_step).count();
    t_step = now;
  };
  // A check's own time in the judge and, of it, its waits for the device: parts of its step,
  // "<step>.judge" and "<step>.sync" (what is left of the step is the requests' way there and back).
  auto judge_parts = [&](const std::string& name, const Reply& rep) {
    steps[name + ".judge"] += rep.message.value("judge_ms", 0.0);
    steps[name + ".sync"] += rep.message.value("sync_ms", 0.0);
  };
  const double budget_ms = opts_.timing_budget_s * 1e3;
  bool last = false;
  for (int i = 0; !last; ++i) {
    const auto t_trip = Clock::now();
    t_step = t_trip;
    // Known before the judge's check: it keeps the last round trip's outputs for the full compare.
    last = i >= warm && timed_trips_done(i - warm + 1, iters, timed_ms, budget_ms);
    // Given inputs: neither side loads anything (time_give copies the sets into both sides' slots).
    std::vector<size_t> fresh;
    for (int j = 0; j < per && !given; ++j) {
      const size_t k = set_of(i, j);
      if (loaded[k].is_null() && std::find(fresh.begin(), fresh.end(), k) == fresh.end()) fresh.push_back(k);
    }
    double load_ms = 0, ref_load_ms = 0;
    if (!fresh.empty()) {
      // The baseline of a candidate's load: the judge's load of the same sets, just before in a
      // paired batch, else ensure_load_baselines' of this round trip.
      double base = 0;
      if (paired) {
        Reply rl = load(true, fresh, ref_loaded, 0, nullptr);
        if (!rl.ok()) return judge_failed(rl, "load the reference's paired input sets");
        base = ref_load_ms = rl.elapsed_ms;
        step("reference_load");
      } else if (cand && static_cast<size_t>(i) < dev.load_baseline_ms.size()) {
        base = dev.load_baseline_ms[static_cast<size_t>(i)];
      }
      idle.go();  // (a paired candidate that makes its own sets, clocked against the judge's load)
      Reply l = load(cand == nullptr, fresh, loaded, base, &load_excess_ms);
      if (!idle.stop()) return not_stopped();
      if (!l.ok()) return failed(l, "timing (loading input sets)");
      load_ms = l.elapsed_ms;
      if (baselines) dev.load_baseline_ms[static_cast<size_t>(i)] = load_ms;
      step("load");
    }
    Json on_sets = Json::array(), on_trials = Json::array(), ref_sets = Json::array();
    for (int j = 0; j < per; ++j) {
      on_sets.push_back(given ? given_sets[static_cast<size_t>(j)] : loaded[set_of(i, j)]);
      on_trials.push_back(sets[set_of(i, j)].trial);
      if (paired) ref_sets.push_back(given ? ref_given[static_cast<size_t>(j)] : ref_loaded[set_of(i, j)]);
    }
    if (given) {
      // This round trip's sets into the candidate's input slots and the reference's own, copied
      // at once from the sets the judge kept as made (not clocked: each side's load).
      Reply g = judge_call(dev, Json{{"op", "time_give"}, {"trials", on_trials}}, timeout);
      if (!g.ok()) return judge_failed(g, "hand the round trip's input sets over");
      ref_load_ms = g.elapsed_ms;
      step("give");
    }
    bool idle_gpu = true;
    const double flush_ms = paired ? settle(&idle_gpu) : flush();
    if (!idle_gpu) return gpu_busy();
    if (!calls.empty() && !paired) calls.back().next_flush_ms = flush_ms;
    if (cuda) flushes.push_back(flush_ms);
    step("flush");
    idle.go();
    step("continue");
    Reply c = ask(Json{{"op", "time_call"}, {"sets", on_sets}});
    if (!c.ok()) return failed(c, "timing");
    step("call");
    // The judge reads this round trip's values from the region, every slot at every fingerprint
    // position (its own region for the reference: the same work). Clocked too, so work a
    // candidate finishes after its reply, before the judge reads, is inside the clock (all but
    // the ping we take off).
    Reply chk = judge_call(dev, Json{{"op", "check_timed"}, {"trials", on_trials}, {"own", cand == nullptr},
                                            {"keep", last && cand != nullptr}},
                           opts_.load_timeout_s);
    if (!chk.ok()) {
      if (cand) {
        r->verdict = Verdict::not_verified;
        r->message = fmt::format("the judge could not check timed round trip {}: {}: {}", i - warm, chk.error_kind(),
                                 chk.error_message());
      } else {
        warn(fmt::format("reference timing on {}: the judge could not check a call: {}", dev.name, chk.error_message()));
      }
      return std::nullopt;
    }
    step("check");
    judge_parts("check", chk);
    double next_flush_ms = 0;
    double ref_check_ms = cand ? -1.0 : chk.elapsed_ms;  // the reference's own batch: its check is not charged
    if (paired) {
      // The candidate stopped, the flushes right after its round trip (its queued work shows and
      // is waited out here, charged to it), then the reference's round trip on the same sets, clocked the same way.
      if (!idle.stop()) return not_stopped();
      step("stop");
      next_flush_ms = settle(nullptr);
      step("flush_after");
      Reply rc = judge_call(dev, Json{{"op", "time_call"}, {"sets", ref_sets}}, timeout);
      if (!rc.ok()) return reference_failed(rc, "its round trip");
      step("reference_call");
      Reply rk = judge_call(dev, Json{{"op", "check_timed"}, {"trials", on_trials}, {"own", true}}, opts_.load_timeout_s);
      if (!rk.ok()) return reference_failed(rk, "the check of its round trip");
      step("reference_check");
      judge_parts("reference_check", rk);
      ref_check_ms = rk.elapsed_ms;
      if (i >= warm) {
        ref_calls.push_back(CallClock{rc.elapsed_ms, rk.elapsed_ms, 0, 0, per, rk.elapsed_ms});
        ref_loads.push_back(ref_load_ms);
      }
    }
    // Still on the CPU it was pinned to, every thread of it (a candidate that moved to a faster
    // core would time its launches there, the reference's on ours). Checked with the process
    // stopped, when paired; the sandbox's seccomp filter makes the move fail in the first place.
    if (cand && pin.cpu >= 0) {
      if (const std::string moved = cand->proc.cpus_escape({pin.cpu}); !moved.empty()) {
        r->verdict = Verdict::cheat;
        r->rule = "cpu_affinity_changed";
        r->message = fmt::format("in round trip {} of its timing the candidate left the CPU the timing is pinned to: {}",
                                 i + 1, moved);
        return std::nullopt;
      }
      step("affinity");
    }
    const double trip_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_trip).count();
    if (i < warm) {
      load_excess_ms = 0;  // a warmup round trip's load is not charged to the first timed one
      if (trip_ms > kSlowTripMs) warm = i + 1;  // warm enough: the timed round trips start with the next
      continue;
    }
    timed_ms += trip_ms;
    calls.push_back(CallClock{c.elapsed_ms, chk.elapsed_ms, next_flush_ms, load_excess_ms, per, ref_check_ms});
    loads.push_back(load_ms);
    load_excess_ms = 0;
    // The worker's claim (a number where present: reply_shape_error), never used for a time; an
    // absurd one counts as none.
    if (const double ev = c.message.value("event_ms", 0.0); ev >= 0 && ev < 1e9) events_ms += ev;
    if (!cand) continue;
    const int first_call = (i - warm) * per;
    if (!c.message.value("output_bound", false)) {
      r->verdict = Verdict::cheat;
      r->rule = "timed_output_mismatch";
      r->message = fmt::format("timed call {} did not put its outputs in the judge's output region: {}", first_call,
                               c.message.value("output_unbound", std::string("no reason given")));
      return std::nullopt;
    }
    // The last round trip's whole outputs against the full references (not clocked): here, or
    // after the exclusive hold on the judge's copy of them, taken now (the candidate stopped
    // since its check, what it left queued waited out by the flushes after it).
    Reply full = chk;
    // (A copy the judge will not take, too large: compared here, as before.)
    Reply snap;
    if (chk.message.value("match", false) && last && whole_after && paired) {
      snap = judge_call(dev, Json{{"op", "time_snapshot"}, {"trials", on_trials}, {"candidate", cand->id()}},
                        opts_.load_timeout_s);
      if (!snap.ok() && snap.error_kind() != "unsupported") {
        return judge_failed(snap, "copy the last timed output for its whole check");
      }
    }
    if (snap.ok()) {
      step("snapshot");
      whole_after->pending = true;
      whole_after->first_call = first_call;
      whole_after->baseline_set_ms = baseline_median_ms > 0 ? dev.flush_baseline_ms.load() : 0.0;
      whole_after->sets.clear();
      for (int j = 0; j < per; ++j) whole_after->sets.push_back(set_of(i, j));
    } else if (chk.message.value("match", false) && last) {
      full = judge_call(dev, Json{{"op", "check_timed"}, {"trials", on_trials}, {"full", true}, {"candidate", cand->id()}},
                        opts_.load_timeout_s);
      if (!full.ok()) {
        whole_check_failed(*r, full);
        return std::nullopt;
      }
      step("full_check");
    }
    if (!full.message.value("match", false)) {
      const int slot = std::clamp(full.message.value("slot", 0), 0, per - 1);
      timed_mismatch(*r, first_call + slot, sets, set_of(i, slot), full);
      return std::nullopt;
    }
  }
  if (!calls.empty() && !paired) calls.back().next_flush_ms = flush();
  TimingResult t;
  t.meaningful = cuda;
  t.ping_ms = ping_ms;
  t.calls_per_trip = per;
  t.warmup_trips = warm;
  t.cpu = pin.cpu;
  t.cpu_note = pin.note;
  t.load_ms = std::move(loads);
  if (!cand && cuda && !flushes.empty()) {
    // The reference's flushes (its probe's, a torch.compile batch's, select's baselines').
    const double median = timing_stats(flushes).median_ms;
    dev.flush_baseline_ms = capped_flush_baseline(median, dev.flush_floor_ms);
    t.flush_median_ms = median;
    t.flush_floor_ms = dev.flush_floor_ms;
    t.flush_baseline_ms = dev.flush_baseline_ms;
  } else if (paired && cuda) {
    // The baseline this batch's flushes were held to (measured at its start: its median too).
    t.flush_median_ms = baseline_median_ms;
    t.flush_floor_ms = dev.flush_floor_ms;
    t.flush_baseline_ms = dev.flush_baseline_ms;
  }
  baseline_kept.complete = true;
  t.times_ms = published_call_times(calls, ping_ms, cand ? dev.flush_baseline_ms.load() : 1e300, &t.flush_excess_ms,
                                    &t.check_excess_ms);
  for (const CallClock& c : calls) t.load_excess_ms += c.load_excess_ms;
  if (paired) {
    t.paired_ref_ms = published_call_times(ref_calls, ping_ms, 1e300, nullptr);
    t.paired_load_ms = std::move(ref_loads);
    t.inputs = given ? "given" : "made by the candidate: " + inputs_note;
    t.paused = idle.ever;
    t.flush_repeats = flush_repeats;
  }
  t.stats = timing_stats(t.times_ms);
  t.event_total_ms = events_ms;
  for (const CallClock& c : calls) t.wall_total_ms += c.call_ms + c.check_ms;
  t.orchestrator_wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_batch).count();
  t.trip_steps_ms = std::move(steps);
  return t;
}

bool timed_trips_done(int timed, int iters, double timed_ms, double budget_ms) {
  return timed >= iters || (timed >= std::min(kMinTimedTrips, iters) && timed_ms >= budget_ms);
}

int calls_per_trip_for(bool cuda, size_t n_sets, int trips, uint64_t output_bytes, double ref_call_ms) {
  // Every call of the batch on its own set, and the region's slots within kTripRegionBytes.
  const uint64_t by_sets = n_sets / static_cast<size_t>(std::max(1, trips));
  const uint64_t by_region = kTripRegionBytes / std::max<uint64_t>(1, output_bytes);
  const int fit = static_cast<int>(std::min<uint64_t>({by_sets, by_region, uint64_t{1024}}));
  if (!cuda) return std::clamp(fit, 1, kCpuCallsPerTrip);
  // Enough calls that a round trip holds about kTripWorkMs of the reference's own GPU time, so
  // the fixed cost of the round trips and the check is a small share of each published time.
  const int want = ref_call_ms > 0 ? static_cast<int>(std::min(1024.0, std::ceil(kTripWorkMs / ref_call_ms))) : kMaxCallsPerTrip;
  return std::clamp(std::min(want, fit), 1, kMaxCallsPerTrip);
}

GpuIdle Verifier::gpu_idle_for_yield(DeviceState& dev, const std::function<bool()>& stop) {
  DeviceState& root = dev.root();
  // The judge first, without waiting for it (a comparison or a chunk of timing sets may hold it for
  // seconds, and the candidate would wait stopped, uncounted).
  std::unique_lock lock(root.judge_mu, std::try_to_lock);
  if (!lock) return GpuIdle::not_now;
  if (!root.judge || !root.judge->proc.running() || !root.healthy) return GpuIdle::unknown;
  if (!stop()) return GpuIdle::busy;  // a thread of the candidate still running
  const double base = root.flush_baseline_ms;
  const double threshold = base > 0 ? base + flush_margin_ms(base) : 1.0;
  const Deadline until = deadline_in(GpuUse::kIdleLookS);
  for (;;) {
    // (The timed batch's own flush deadline: a failed request costs the judge, and the device.)
    Reply f = judge_call_locked(root, Json{{"op", "l2_flush"}}, 60);
    if (!f.ok()) return GpuIdle::unknown;
    if (f.elapsed_ms <= threshold) return GpuIdle::idle;
    if (Clock::now() >= until) return GpuIdle::busy;
  }
}

}  // namespace kernelllm::harness
