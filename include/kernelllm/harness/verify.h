// The verifier's C++ API: verify(problem, candidates, options) runs a trusted judge per device,
// one sandboxed pre-warmed worker per candidate (never reused), correctness trials, timing
// serialized per GPU, cheat rules, the result cache and the choice among correct candidates.
// Every candidate gets a verdict with evidence; only infrastructure failures (no Python, the
// problem cannot load, no healthy device) are errors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/harness/timing.h"

namespace kernelllm::harness {

inline constexpr std::string_view kVerifierVersion = "verify-9";  // 3: several timed calls per round trip; 4: up to 64, waits charged beyond their thresholds; 5: speedups paired round trip by round trip; 6: every round trip held to the normalized-error bound, inputs handed over, blind_tolerance; 7: timing pinned to one CPU, a candidate charged its check only beyond the reference's; 8: GPU work a paired candidate left queued waited out before the reference's round trip; 9: a size variant the candidate's process took part in cannot end without a result, a run reply the rules cannot read fails the trial

enum class Verdict {
  correct,
  wrong_output,
  wrong_shape,
  compile_error,
  runtime_error,
  crash,
  timeout,
  cheat,
  sandbox_violation,
  undiscriminating,   // matched, but trivial outputs (zeros, mean) would match too: not evidence
  environment_error,  // our environment cannot run it (Triton interpreter/NumPy limitation)
  not_verified,       // infrastructure: no healthy device or worker left for it
};
std::string_view verdict_name(Verdict v);
std::optional<Verdict> verdict_from_name(std::string_view name);

inline constexpr int kTimingCpuAuto = -2, kTimingCpuOff = -1;

struct VerifyOptions {
  std::string profile = "strict";            // strict | kernelbench
  std::string kernelbench_tolerance = "v0";  // v0 | current (kernelbench profile)
  std::vector<std::string> devices = {"cpu"};  // "cpu" or "cuda:N" (one judge and timing lock each)
  int jobs = 0;                              // parallel candidate workers; 0: min(cores, candidates)
  int n_trials = 5;
  bool sandbox = true;
  uint64_t memory_bytes = uint64_t{8} << 30;  // per candidate
  int max_tasks = 1024;                        // processes + threads per candidate
  bool use_cache = true;
  std::string cache_path;  // empty: default_cache_path()
  bool timing = true;
  bool time_compile = false;  // also time torch.compile(reference)
  int warmup = 3;
  int iters = 20;
  bool select = true;  // re-time finalists side by side and pick one
  int finalists = 3;
  // Multi-shape check: after a `correct` verdict, re-run correctness on problem variants with
  // the size globals changed (a judge per variant, a fresh candidate process per variant).
  bool multishape = true;
  int multishape_trials = 2;
  // Keep this call's judge processes for the next calls of this process (an `eval` run's
  // problems, an optimize call's rounds, a REPL session's modules): each then starts from a
  // judge another call released instead of a fresh process
  // (docs/verification.md, "Judges across problems"). end_kept_judges() ends the ones kept.
  bool reuse_judges = false;
  double start_timeout_s = 180;    // worker start (torch import) until hello
  double load_timeout_s = 120;     // import + construct ModelNew (includes Triton JIT at first run? no: run)
  double run_timeout_min_s = 30;   // per run: max(this, factor × reference forward time)
  double run_timeout_factor = 50;
  double timing_timeout_s = 300;
  // A timed batch's round trips within a budget (timed_trips_done): after kMinTimedTrips timed
  // round trips (or `iters`, if fewer), none more once they have taken this long together.
  double timing_budget_s = 5;
  // The CPU that runs a timed batch's round trips: the orchestrator's thread, the judge and the
  // candidate are all pinned to it (a process's launch overheads depend on the CPU it runs on).
  // kTimingCpuAuto: on a GPU, one CPU per physical GPU (the last one this process may use for GPU
  // 0, the one before for GPU 1, ...: CUDA_VISIBLE_DEVICES mapped), none on the CPU;
  // kTimingCpuOff: none; else that CPU.
  int timing_cpu = kTimingCpuAuto;
  double peak_bandwidth_gbs = 0;   // roofline floor; 0: from the device name, else 10000 GB/s
  std::string python;              // empty: $KERNELLLM_PYTHON, else python3 on PATH
  std::string package_dir;         // dir holding kernelllm/worker; empty: auto
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
  // Called (from a verifier thread, serialized) when a candidate's verdict is known, cached ones
  // included: index into the candidate list and its result. A correct candidate's multi-shape
  // check and the selection re-timing come later and only appear in the final report.
  std::function<void(size_t, const struct CandidateResult&)> on_result;
  // When *cancel becomes true (the REPL's Ctrl+C), the workers stop at their next wait (within
  // 200 ms), nothing more is started, and verify() returns an error instead of a report.
  const std::atomic<bool>* cancel = nullptr;
};

// One timed batch, clocked by the orchestrator (docs/verification.md, Timing): per timed call the
// round trips of `time_call` and `time_sample`, less two no-op round trips, plus what the judge's
// next L2 flush waited for the GPU beyond its baseline. The worker's own events are reported only.
struct TimingResult {
  bool meaningful = false;  // false on CPU
  TimingStats stats;
  std::vector<double> times_ms;    // published per-call times (our clock)
  double event_total_ms = 0;       // the worker's CUDA-event times, summed: its own claim, untrusted
  double wall_total_ms = 0;        // the timed calls' round trips, summed (our clock)
  double orchestrator_wall_ms = 0; // our clock around the whole batch, value checks included
  double ping_ms = 0;              // median no-op round trip to the judge, subtracted twice per call
  double flush_excess_ms = 0;      // flush waits charged to the calls before them (work left queued)
  // Paired: the candidate's clocked checks beyond the reference's of the same sets, summed over the
  // timed round trips (work finished after its reply, or the GPU slow to come back to the judge
  // after the candidate's calls: docs/verification.md, Timing).
  double check_excess_ms = 0;
  // The GPU's idle flush: the idle baseline this batch was held to (a paired batch's; a reference
  // batch's own), the quickest flush at set-up that caps it, and the median it was measured from
  // when this batch measured it (a reference batch's flushes, or the first paired batch's first
  // ones; 0: an earlier batch did). All 0 on a CPU.
  double flush_median_ms = 0, flush_floor_ms = 0, flush_baseline_ms = 0;
  double load_excess_ms = 0;       // input-set loads beyond the judge's, charged to the next calls
  int calls_per_trip = 1;          // timed calls per round trip; each published time is a trip's share
  int warmup_trips = 0;            // untimed round trips first (fewer than asked after a slow one)
  std::vector<double> load_ms;     // per timed round trip, its time_load round trip (0: no new sets)
  // A candidate's batch on a GPU is paired (docs/verification.md, Timing): each of its round trips
  // is followed by one of the reference on the same sets, in the judge. Per timed round trip, the
  // reference's per-call time and its time_load (the candidate's load baseline, taken just before).
  std::vector<double> paired_ref_ms, paired_load_ms;
  std::string inputs;   // paired: "given" (the judge's input region), else why the candidate made them
  bool paused = false;  // paired: the candidate's process was stopped between its round trips
  int flush_repeats = 0; // paired: flushes beyond one per wait for the GPU to go idle (before and after its round trips)
  int cpu = -1;         // the CPU its round trips ran on, every side pinned (-1: not pinned)
  std::string cpu_note; // why not pinned, when pinning was asked for and failed
  // Our clock over the round trips (warmup included), step by step: the sets' loads and hand-over,
  // flushes, the candidate's continue and stop, its calls and their checks, the paired reference's
  // and the affinity check, summed (ms). Where an exclusive hold's time goes besides the calls.
  // "check.judge" and "check.sync" (and the reference's): of a check, the judge's own time and its
  // waits for the device in it (parts of "check", not added to it).
  std::map<std::string, double> trip_steps_ms;
  // The reference's timing taken from a candidate's paired batch (reference_from_paired): that
  // candidate; empty for a batch of the reference's own.
  std::string paired_with;
};
// Per timed round trip, the reference's time over the candidate's (empty unless paired): the
// speedup is their median, so that what slows the machine for a while slows both sides of a ratio.
std::vector<double> paired_speedups(const TimingResult& t);
// The idle flush baseline from the median of a batch's idle flushes: never more than 3x the
// quickest flush the judge saw at set-up, before any candidate of the call had loaded
// (`floor_ms`; 0: none) plus 0.5 ms. GPU work a candidate keeps queued while the baseline is
// measured would raise it to a time slice and let its own leftover work go uncharged (red team).
double capped_flush_baseline(double median_ms, double floor_ms);
// The reference's side of a paired batch `t` (candidate `candidate`'s) as a timing of its own: its
// round trips' per-call times, loads, and the idle flush baseline measured at the batch's start.
TimingResult reference_from_paired(const TimingResult& t, const std::string& candidate);

// One size variant of the problem in the multi-shape check.
struct ShapeVariant {
  std::string name;       // "half", "odd"
  double size_scale = 1;  // factor on the problem's int size globals
  bool size_odd = false;  // then made odd
};
// The variants the orchestrator asks the judge for.
std::vector<ShapeVariant> default_shape_variants();

struct ShapeVariantResult {
  std::string name;
  Verdict verdict = Verdict::not_verified;
  std::string message;
  Json sizes = Json::object();  // {global: [old, new]} as the judge reported them
  // The candidate's process took part in this variant (its load was asked for): a result it did
  // not reach from then on (a judge that could not compare its outputs, an error it provoked)
  // fails the check instead of leaving it without evidence.
  bool ran = false;
};

// The merged multi-shape result: fail when any variant failed (any verdict other than correct,
// undiscriminating or an inconclusive one, not_verified or environment_error, of a variant the
// candidate's process did not take part in); pass when no variant failed and at least one was
// conclusive; nullopt when none was conclusive.
enum class ShapeVerdict { pass, fail };
std::string_view shape_verdict_name(ShapeVerdict v);
std::optional<ShapeVerdict> merge_variant_verdicts(const std::vector<ShapeVariantResult>& variants);

struct MultishapeResult {
  ShapeVerdict verdict = ShapeVerdict::fail;
  std::vector<ShapeVariantResult> variants;
  Json to_json() const;
};

struct CandidateResult {
  std::string path;
  std::string device;
  Verdict verdict = Verdict::not_verified;
  std::string rule;     // cheat rule, or the error kind
  std::string message;  // one-line reason
  std::string stderr_tail;
  Json stats;           // error statistics from the judge (last compared trial)
  Json evidence;        // everything else: exit status, violations, trial index, phase times
  std::optional<TimingResult> timing;
  double speedup = 0;   // reference median / candidate median (meaningful timings only)
  bool cached = false;
  // Reported beside the verdict, never changing it; absent with the reason in multishape_note.
  std::optional<MultishapeResult> multishape;
  std::string multishape_note;
  Json to_json() const;
};

struct VerifyReport {
  std::string problem;
  std::string profile;
  std::string sandbox;  // the one-line summary of active protections
  // How workers started: "zygote" (forked from one pre-imported process) or "exec", with why
  // the zygote was not used where it was not (for some or all of them).
  std::string worker_start;
  std::vector<std::string> warnings;
  Json environment;     // python, torch, triton, devices
  std::optional<TimingResult> reference_timing;
  std::optional<TimingResult> compile_timing;
  std::vector<CandidateResult> candidates;
  std::optional<size_t> selected;
  std::string selection_reason;
  // Where the call's wall time went, in ms from the start of its set-up: "python_probed" (the
  // interpreter's torch and devices known), "zygote_ready" (the pre-imported parent of workers and
  // judges), "judge_started" (greeted), "setup" (the judge has loaded the problem),
  // "reference_prepare_started" and "reference_prepared" (the reference's probe and timing sets,
  // made from the first candidate not answered from the cache on, with timing),
  // "reference_batch_started" (its last batch, in the first timed candidate's exclusive hold),
  // "variants_started" (the size variants' judges started, once a candidate's first trial
  // matched; absent when none did), "candidates"
  // (every candidate verified, multi-shape checks included), "selection" (finalists re-timed, when
  // there were any), "total"; and "gpu_exclusive", how long the call held its devices to itself
  // (timing, profiled runs, re-timing), summed over them.
  Json timeline_ms = Json::object();
  // How the call used its devices' locks, by purpose: {"<what>": {"mode", "n", "wait_ms",
  // "hold_ms", "max_hold_ms"}} (shared: ours running on the GPU; exclusive: timing, profiling).
  Json gpu_use = Json::object();
  // The judges' requests by op: {"<op>": {"n", "ms", "max_ms"}} (round trips, summed over devices).
  Json judge_ms = Json::object();
  // Judge processes the call started (each makes a CUDA context on a GPU): one per device, and one
  // per size variant once a candidate matched its first trial; a judge that did not greet and was
  // started again counts again.
  int judges_started = 0;
  // Judge processes it took from earlier calls instead (VerifyOptions::reuse_judges).
  int judges_reused = 0;
  Json to_json() const;
};

// Ends the judge processes that calls with VerifyOptions::reuse_judges kept for later ones (each
// holds a CUDA context and its memory); returns how many.
int end_kept_judges();
// end_kept_judges() when it goes out of scope (unless made with false): held by whoever lets its
// verify calls keep judges (eval's run, the REPL's session, optimize's rounds).
class EndKeptJudgesAtExit {
 public:
  explicit EndKeptJudgesAtExit(bool on = true) : on_(on) {}
  ~EndKeptJudgesAtExit() {
    if (on_) end_kept_judges();
  }
  EndKeptJudgesAtExit(const EndKeptJudgesAtExit&) = delete;
  EndKeptJudgesAtExit& operator=(const EndKeptJudgesAtExit&) = delete;

 private:
  bool on_;
};

Result<VerifyReport> verify(const std::string& problem_path, const std::vector<std::string>& candidate_paths,
                            const VerifyOptions& options);

// verify() whose set-up starts before its candidates exist: on a thread of the session's own, the
// judges load the problem and candidate workers start (torch imported) while the caller does
// other work, e.g. the engine generating those candidates (pipeline/optimize.cpp). `expected`
// candidates size the workers started ahead. verify() (or start/add/close) is called once (a new
// `on_result` replaces the options' when given); the destructor stops whatever still runs.
class VerifySession {
 public:
  VerifySession(std::string problem_path, VerifyOptions options, size_t expected);
  ~VerifySession();
  VerifySession(const VerifySession&) = delete;
  VerifySession& operator=(const VerifySession&) = delete;
  Result<VerifyReport> verify(const std::vector<std::string>& candidate_paths,
                              std::function<void(size_t, const struct CandidateResult&)> on_result = {});
  // Or candidates as they come (verify() is these three): start() with room for at least
  // `capacity` (and `expected`); add() hands one over, verified as soon as a worker is free, and
  // returns its index (on_result's and the report's); close() says no more come and waits for the
  // report. One set of candidates per session.
  Status start(std::function<void(size_t, const struct CandidateResult&)> on_result = {}, size_t capacity = 0);
  Result<size_t> add(const std::string& candidate_path);
  Result<VerifyReport> close();
  // How long the set-up took (ms), once it is done; else -1.
  double setup_ms() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Starts, on a thread of its own, what the first verify call of `options` waits for before anything
// else: the zygote (the pre-imported parent of judges and workers, shared by every verifier of the
// process) and the interpreter's probe, so that they get ready while the caller loads a model.
// Nothing to wait for: a verifier set up later takes the zygote as it finds it (ready, starting,
// or started anew when this failed). The destructor waits for the thread (the probe; the zygote's
// imports are not waited for).
class VerifierPrewarm {
 public:
  explicit VerifierPrewarm(const VerifyOptions& options);
  ~VerifierPrewarm();
  VerifierPrewarm(const VerifierPrewarm&) = delete;
  VerifierPrewarm& operator=(const VerifierPrewarm&) = delete;

 private:
  std::thread thread_;
};

// Holds GPU `device` ("cuda:N") for an engine (its engine lock shared, across the kernelllm
// processes of the host) for as long as it lives: timing on that GPU waits until it is gone,
// correctness runs do not. For work beside the verifier that timing must not overlap (the engine
// writing samples while earlier ones are verified). Nothing for "cpu".
class GpuShare {
 public:
  explicit GpuShare(const std::string& device);
  ~GpuShare();
  GpuShare(const GpuShare&) = delete;
  GpuShare& operator=(const GpuShare&) = delete;

 private:
  int fd_ = -1;  // the GPU's engine lock file, flocked shared (-1: nothing held)
};

// Where this process's GPU locks' time went, per lock file ("gpu-0", ...), from its first taking
// to its last release: `exclusive_ms` (a timer held it), `draining_ms` (a timer waited for
// shared holders to end or yield, every later shared taker waiting behind it), `shared_ms`
// (shared holders only), `free_ms` (nothing held, nobody waiting), and `drains` (times a timer
// began to wait while shared holders had it). Takings of other processes are not seen.
Json gpu_lock_times();

// "cuda" → every visible GPU (asks the Python probe), "cuda:0,cuda:1", "cpu".
Result<std::vector<std::string>> parse_devices(std::string_view spec);

// Roofline floor in ms for moving `bytes` at `peak_gbs`.
inline double roofline_floor_ms(uint64_t bytes, double peak_gbs) {
  return peak_gbs <= 0 ? 0 : static_cast<double>(bytes) / (peak_gbs * 1e9) * 1e3;
}
// Peak DRAM bandwidth for known GPUs by name (GB/s), else a generous upper bound.
double peak_bandwidth_for(std::string_view device_name);

// One round trip of timed calls as the orchestrator's clock saw it.
struct CallClock {
  double call_ms = 0;        // round trip of time_call (the calls' forwards and copies into the region, synchronize)
  double check_ms = 0;       // round trip of the judge's check of the region (the work must be done)
  double next_flush_ms = 0;  // round trip of the judge's L2 flush right after (0: none, on CPU)
  double load_excess_ms = 0; // input-set loads before it that took longer than the judge's (work done early)
  int calls = 1;             // timed calls in the round trip
  // The part of check_ms not charged: the round trip of the judge's check of the same sets in the
  // reference's region (a paired round trip; the reference's own: its check). Negative: none, the
  // whole check is charged.
  double check_baseline_ms = -1;
};
// Published per-call times, one per round trip: (call - ping + the check beyond its baseline (else
// the check - ping) + load excess, plus the next flush's wait beyond `flush_baseline_ms` when it
// exceeds max(0.1 ms, half the baseline): work a reply left queued on the GPU delays the judge's
// flush) / calls; the charged waits are added to *excess_ms, and the checks charged beyond their
// baselines (a paired round trip's) to *check_excess_ms. Never below 1 ns.
std::vector<double> published_call_times(const std::vector<CallClock>& calls, double ping_ms, double flush_baseline_ms,
                                         double* excess_ms, double* check_excess_ms = nullptr);
// Timed calls per round trip (docs/verification.md, Timing): up to kMaxCallsPerTrip on a GPU, as
// many as make about kTripWorkMs of the reference's own GPU time (a kernel of microseconds gets
// the most, whatever its run-to-run jitter), each call on its own set and
// writing its own slot of the output region (at most kTripRegionBytes); on CPU, where times are
// not meaningful, kCpuCallsPerTrip so that the same path runs in every test.
inline constexpr int kMaxCallsPerTrip = 64;
inline constexpr int kCpuCallsPerTrip = 2;
inline constexpr double kTripWorkMs = 10.0;
inline constexpr uint64_t kTripRegionBytes = uint64_t{256} << 20;
// A slow kernel's round trips within a budget: 64 calls of a kernel of 50 ms per round trip held
// the GPU's timing lock for 74 s over 23 round trips, for a median and spread that a few round
// trips of seconds each give as well. The warmup ends after a round trip (the candidate's and its
// paired reference's) that took over kSlowTripMs; the timed round trips stop after at least
// min(kMinTimedTrips, iters) of them once they have taken `budget_ms` together.
inline constexpr int kMinTimedTrips = 5;
inline constexpr double kSlowTripMs = 500;
bool timed_trips_done(int timed, int iters, double timed_ms, double budget_ms);
// The calls per round trip for `n_sets` timing sets, `trips` round trips, outputs of
// `output_bytes` and a reference call of `ref_call_ms` (its CUDA events; 0 when unknown).
int calls_per_trip_for(bool cuda, size_t n_sets, int trips, uint64_t output_bytes, double ref_call_ms);
// The calls per round trip when known without the reference's probe (0: the probe decides): on a
// CPU, or with room for one call a round trip, whatever the reference's time.
int calls_per_trip_without_probe(bool cuda, size_t n_sets, int trips, uint64_t output_bytes);

// Empty, or why a median below the roofline floor for `bytes` at `peak_gbs` cannot be true.
std::string roofline_violation(const TimingResult& t, double floor_ms, uint64_t bytes, double peak_gbs);
// A batch whose IQR exceeds half its median, or whose paired speedups' IQR exceeds half their
// median: what it publishes does not repeat within its noise.
bool timing_unstable(const TimingResult& t);

// Run directories: run_dir_base()/kernelllm-verify-<pid>-<infix>XXXXXX, made by make_run_dir, which
// refuses once stop_making_run_dirs was called. The CLI's SIGINT/SIGTERM clean-up calls it before
// it removes this process's run directories, so that a verifier still starting on another thread
// cannot make one after them and leave it behind: a directory made while the stop comes is
// removed by its maker (checked again after mkdtemp).
std::string run_dir_base();  // /dev/shm when writable (output files in RAM), else the temp dir
Result<std::string> make_run_dir(std::string_view infix = "");
void stop_making_run_dirs();
bool making_run_dirs_stopped();  // a SIGINT/SIGTERM clean-up is under way (stop_making_run_dirs was called)

}  // namespace kernelllm::harness
