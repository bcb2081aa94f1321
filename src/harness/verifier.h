// Internal to the harness: the state of one verify() run, shared by verify.cpp (set-up, the
// worker threads, cache), evaluate.cpp (one candidate: load, trials, timing, rules) and
// select.cpp (side-by-side re-timing of finalists).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernelllm/harness/cache.h"
#include "kernelllm/harness/sandbox.h"
#include "kernelllm/harness/verify.h"
#include "gpu_lock.h"
#include "judge_pool.h"
#include "workers.h"
#include "zygote.h"

namespace kernelllm::harness {

inline constexpr uint64_t kMaxTensorBytes = uint64_t{4} << 30;  // per tensor file a worker reads
inline constexpr uint64_t kTimingSetBytes = uint64_t{2} << 30;  // all timing sets: inputs + 3 x outputs
// A run directory: <base>/kernelllm-verify-<pid of the verifying process>-XXXXXX.
inline constexpr std::string_view kRunDirPrefix = "kernelllm-verify-";
// Removes the run directories under `base` whose owning process no longer exists (same uid;
// names without a pid are left alone); returns how many.
int remove_stale_run_dirs(const std::filesystem::path& base);

// A trial's input set as the orchestrator knows it: never the values, which the judge and the
// candidate's process each make from the seed (worker/inputs.py), only what to ask for and sizes.
struct TrialInput {
  int trial = 0;       // the judge's trial index
  int64_t seed = 0;    // this trial's seed (sha256 of the run's secret and the trial)
  bool probe = false;  // the candidate also runs the probe set (trial 0, strict)
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  std::string distribution;
  Json output_sizes = Json::array();  // bytes per reference output (poisoning sizes)
  double reference_ms = 0;  // wall time of make_inputs (reference forward, fp64 included)
  // The `inputs` member of a candidate's run / time_load request.
  Json spec() const { return Json{{"seed", seed}, {"distribution", distribution}, {"probe", probe}}; }
};

// What a problem's verification holds on the host (memory_check.cpp), from trial 0's sizes.
struct MemoryNeed {
  std::filesystem::path shared_dir;
  uint64_t input_bytes = 0;   // one input set
  uint64_t output_bytes = 0;  // one set of reference outputs
  uint64_t jobs = 1;          // candidate workers at once
  bool cpu = false;           // inputs, references and timing sets live in host memory too
  uint64_t timing_sets = 0;
};
Status check_problem_memory(const MemoryNeed& need);

struct DeviceState {
  size_t index = 0;
  std::string name;      // "cpu", "cuda:0"
  std::string hardware;  // "cpu" or the GPU's name
  std::unique_ptr<Worker> judge;
  std::mutex judge_mu;   // one judge request at a time
  // Timing takes it exclusively; correctness runs on a GPU take it shared, so that nothing
  // else runs on the GPU while a candidate or the reference is timed.
  GpuMutex gpu_mu;
  std::filesystem::path gpu_lock;  // the same lock across processes (gpu_lock.h); empty on cpu
  Json problem;          // load_problem reply
  std::vector<TrialInput> trials;         // correctness trials 0..n_trials-1
  std::vector<TrialInput> timing_inputs;  // fresh inputs (trials n_trials..) never seen by a run
  std::filesystem::path shared_dir;  // init tensors, bound read-only into candidates
  // The judge's L2 flush round trip with the GPU idle: the first paired batch's first flushes'
  // median (or a reference batch's), capped by the floor (timed_calls.cpp). Atomic: set in an
  // exclusive hold, read by shared holders' yield looks, dropped after a batch's whole check.
  std::atomic<double> flush_baseline_ms{0};
  double flush_floor_ms = 0;         // the quickest of a few at set-up (0: none)
  std::vector<double> load_baseline_ms;  // per round trip: the judge's time_load of its sets from their seeds
  std::optional<TimingResult> ref_timing, compile_timing;
  std::mutex ref_timing_set_mu;  // ref_timing's publication (after a batch's whole check) and reads
  // ensure_reference_timing has readied it (calls per round trip set, sets made or tried): under
  // ref_timing_mu.
  bool ref_ready = false;
  std::mutex ref_timing_mu;  // ensure_reference_timing: once, by the first thread to time
  // prepare_reference_timing's progress (under ref_timing_mu): the probe batch ran (or its answer
  // was known without it), the sets of the batch it calls for (ref_batch_per calls a round trip;
  // 0: none, the probe failed or was the whole timing) are made.
  bool ref_probed = false, ref_prepared = false;
  int ref_batch_per = 0;
  bool ref_started = false;  // start_reference_timing ran (under Verifier::ref_threads_mu_)
  int calls_per_trip = 1;  // timed calls per round trip, chosen with the reference's timing
  std::atomic<bool> healthy{true};
  // Multi-shape check: a variant is a DeviceState of its own (inputs, shared dir, health; its
  // judge a slot of the variants' one process, below) on the same device; its GPU lock is its
  // parent's.
  DeviceState* parent = nullptr;
  ShapeVariant variant;
  Json size_globals;              // the variant judge's {global: [old, new]}
  std::string unusable;           // why this variant cannot be checked (empty: usable)
  std::vector<std::unique_ptr<DeviceState>> variants;
  bool variants_ready = false;     // setup_variants has loaded the problem in them
  // One judge process serves all of a device's size variants (a CUDA context each costs the
  // driver's one-at-a-time work): the first variant's. Each variant is a slot of it (`slot` in
  // every request: the variant's name); judge_host is that first variant, null for it and for a
  // device's own judge.
  DeviceState* judge_host = nullptr;
  std::string judge_slot;
  DeviceState& judge_owner() { return judge_host ? *judge_host : *this; }
  bool cuda() const { return name != "cpu"; }
  DeviceState& root() { return parent ? *parent : *this; }
  const DeviceState& root() const { return parent ? *parent : *this; }
  std::string tag() const { return parent ? std::to_string(index) + "-" + variant.name : std::to_string(index); }
};

// timed_calls.cpp, shared with timing_steps.cpp: the input sets of timed runs (the dedicated
// timing sets, else the correctness trials'), and the judge's time_prepare for round trips
// [first, last) of a reference batch of `per` calls per round trip whose last is `final_trip`.
const std::vector<TrialInput>& timing_sets(const DeviceState& dev);
// A timed call (`call`, on timing set k of `sets`) that left wrong values in the output region:
// the cheat, re-checked untimed after the hold (recheck_timing_set); and the judge's own failure
// to compare a round trip's whole outputs (not_verified).
void timed_mismatch(CandidateResult& r, int call, const std::vector<TrialInput>& sets, size_t k, const Reply& full);
void whole_check_failed(CandidateResult& r, const Reply& full);
Json reference_prepare_request(const std::vector<TrialInput>& sets, int first, int last, int per, bool compile,
                               int final_trip);

// How one verify call used its devices' locks, by purpose ("setup", "load", "run", "compare",
// "profiled run", "timing", "re-timing"): takings, time waiting for the lock and holding it, the
// longest hold (the report's "gpu_use"). The hand-overs between shared and exclusive holders are
// what limits throughput on a GPU (bench/results/verify-throughput-h100.json).
class GpuUseStats {
 public:
  // `timer_waited_ms`: how long the hold went on while a timer waited for it (GpuGuard::timer_waited_ms).
  void add(const std::string& what, bool exclusive, double wait_ms, double hold_ms, double timer_waited_ms = 0);
  // A shared hold for `what` that let the lock go while a timer went first (GpuUse::yield_for_timer):
  // its candidate stopped for `stopped_ms`, of which `wait_ms` waiting to take the lock back.
  void add_yield(const std::string& what, double stopped_ms, double wait_ms);
  Json to_json() const;
  double exclusive_hold_ms() const;

 private:
  struct Entry {
    bool exclusive = false;
    int64_t n = 0;
    double wait_ms = 0, hold_ms = 0, max_hold_ms = 0, timer_waited_ms = 0;
    int64_t yields = 0;
    double yield_ms = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_what_;
};

// The judge's requests of one verify call by op: count, summed and longest round trip (the
// report's "judge_ms"), to show which of the judge's work a call's time goes to.
class OpStats {
 public:
  void add(const std::string& op, double ms);
  Json to_json() const;

 private:
  struct Entry {
    int64_t n = 0;
    double ms = 0, max_ms = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_op_;
};

// An exclusive taking asks shared holders to yield while it waits (gpu_lock.h). A look at whether the GPU is idle (Verifier::gpu_idle_for_yield): it calls `stop` (which stops
// the candidate and says whether every thread of it stopped) only once it can look; not_now when
// it cannot look yet (the judge is busy), nothing stopped.
enum class GpuIdle { idle, busy, unknown, not_now };
using IdleLook = std::function<GpuIdle(const std::function<bool()>& stop)>;

// A paired batch's whole-output check of its last round trip, left for after the exclusive hold
// (Verifier::timed_batch): the judge holds a copy of those outputs (time_snapshot), taken with the
// candidate stopped, so nothing the candidate does once it is continued reaches what is compared.
struct WholeCheckAfter {
  bool pending = false;
  std::vector<size_t> sets;     // the round trip's timing sets, call by call (indices into timing_sets)
  int first_call = 0;           // the round trip's first timed call
  double baseline_set_ms = 0;   // the idle flush baseline the batch measured and set (0: none)
};

// `dev`'s lock taken for `what` until destroyed: shared while work of ours runs on the GPU
// (correctness runs, candidate loads, the judge's set-up and comparisons wait while something is
// timed; nothing is taken on the CPU), exclusive while something is timed or profiled. Its wait and
// hold are added to `stats`.
class GpuUse {
 public:
  GpuUse(DeviceState& dev, GpuGuard::Mode mode, std::string what, GpuUseStats& stats);
  ~GpuUse();
  GpuUse(const GpuUse&) = delete;
  GpuUse& operator=(const GpuUse&) = delete;
  double wait_ms() const { return wait_ms_; }  // how long taking the lock took (0: nothing taken)

  // For a shared hold around a request to a candidate's process `proc`, called while its reply is
  // awaited: when a timer waits for the GPU (GpuGuard::yield_wanted) and the hold has lasted
  // kYieldAfterMs, `look` stops the candidate's processes and looks at the GPU; found idle, the
  // hold lets the lock go, takes it back shared (after the timer) and continues them. Returns the
  // seconds they were stopped, to be added to the request's deadline (0: not stopped). A GPU still
  // busy (a kernel that does not end) keeps the lock as before; after kMaxBusy such looks this
  // hold yields no more.
  double yield_for_timer(Process& proc, const IdleLook& look);
  // The hold goes on to other work without letting the GPU go (an exclusive one: the profiled run,
  // then the timing): the part held so far is recorded under the purpose it had, the rest under
  // `what`, with no wait.
  void continue_as(std::string what);
  static constexpr double kYieldAfterMs = 50;
  // How long one look waits for the GPU to go idle (the judge's flushes; other holders stop within
  // a slice of the ask), how long after a busy look the next one waits, and how many busy looks
  // end the yielding of a hold.
  static constexpr double kIdleLookS = 0.25, kBusyBackoffS = 0.25;
  static constexpr int kMaxBusy = 5;

 private:
  std::optional<GpuGuard> guard_;
  GpuMutex* mu_ = nullptr;
  std::filesystem::path file_;
  int yield_fd_ = -2;  // -2: not opened yet
  bool no_more_yields_ = false;
  int busy_seen_ = 0;
  std::chrono::steady_clock::time_point next_look_{};
  GpuUseStats& stats_;
  std::string what_;
  double wait_ms_ = 0, hold_ms_ = 0, timer_waited_ms_ = 0;
  std::chrono::steady_clock::time_point held_since_;
};

// A cached result's "multishape" object back (nullopt when null or malformed).
std::optional<MultishapeResult> multishape_from_json(const Json& j);

// Verify-cache entries are our own, but may be stale or damaged: empty when every member
// result_from_cache reads has its type, else what is wrong (the entry then counts as a miss and
// is rewritten).
std::string cache_entry_error(const Json& j);
// A candidate's result from a cache entry that cache_entry_error accepted.
void result_from_cache(const Json& j, CandidateResult& r);

class Verifier {
 public:
  Verifier(std::string problem, std::vector<std::string> candidates, VerifyOptions opts)
      : problem_path_(std::move(problem)), candidate_paths_(std::move(candidates)), opts_(std::move(opts)) {}
  ~Verifier();  // kills the judges, then removes the run directory (also after a failed set-up)
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;
  Result<VerifyReport> run();  // prepare, then finish with the constructor's candidates
  // In two steps (VerifySession): the set-up for `expected` candidates (judges, the problem, the
  // workers started ahead), then the candidates themselves (a new on_result when given).
  Status prepare(size_t expected);
  // Or candidates as they come (optimize's samples while the engine still writes the others):
  // open_feed starts the workers for up to `capacity` candidates (a new on_result when given);
  // each add() is verified as soon as a worker is free; close_feed() says no more come and returns
  // the report once every one added is verified. finish(candidates) is all three at once.
  void open_feed(size_t capacity, std::function<void(size_t, const CandidateResult&)> on_result = {});
  Status add(const std::string& candidate_path);
  Result<VerifyReport> close_feed();
  Result<VerifyReport> finish(std::vector<std::string> candidates,
                              std::function<void(size_t, const CandidateResult&)> on_result = {});

 private:
  Result<VerifyReport> finish();
  // The index of the next candidate for a worker thread once it has arrived; none once the feed
  // is closed and every one is taken.
  std::optional<size_t> take_candidate();
  bool more_may_come();
  Status setup();
  Status setup_device(DeviceState& dev);
  void worker_thread(size_t thread);
  Result<std::unique_ptr<Worker>> start_candidate_worker(DeviceState& dev, size_t thread);
  DeviceState* pick_device(size_t hint);
  // Raises a candidate worker's memory limit to what the problem needs (setup_device's sizes).
  void size_memory_limit(Worker& w, const DeviceState& dev);
  std::string cache_key_for(size_t i, const DeviceState& dev) const;
  // One judge request; with fd_out, also the descriptor the judge sends with its reply (fd 5).
  Reply judge_call(DeviceState& dev, const Json& request, double timeout_s, int* fd_out = nullptr);
  Reply judge_call_locked(DeviceState& dev, const Json& request, double timeout_s, int* fd_out = nullptr);  // judge_mu held
  // Whether `dev`'s GPU has nothing left running (GpuUse::yield_for_timer): the judge's L2 flush
  // comes back within its idle baseline and margin (1 ms before the reference is timed) within
  // GpuUse::kIdleLookS.
  GpuIdle gpu_idle_for_yield(DeviceState& dev, const std::function<bool()>& stop);
  // The hook that lets a shared hold around a request to `w` yield to a waiting timer.
  std::function<double()> yield_hook(GpuUse& use, Worker& w, DeviceState& dev) {
    if (!dev.cuda()) return {};
    return [this, &use, &w, &dev]() {
      return use.yield_for_timer(w.proc, [this, &dev](const std::function<bool()>& stop) { return gpu_idle_for_yield(dev, stop); });
    };
  }
  void log(const std::string& line) const;
  void notify(size_t index, const CandidateResult& r);
  void warn(const std::string& line);

  // evaluate.cpp
  void evaluate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r);
  // Correctness trials of a loaded candidate: sets verdict (correct/undiscriminating or a failure).
  // `profiled` (a GPU's main trials): the last trial's run is profiled and its facts kept there.
  // `held` (with `profiled`; empty on entry): the profiled run's exclusive hold of the GPU is
  // taken into it and left there, for the caller's kernel check and timing to go on in without
  // letting the GPU go; with timing on, the reference's timing is made ready first.
  void run_trials(Worker& w, DeviceState& dev, CandidateResult& r, Json* profiled = nullptr,
                  std::optional<GpuUse>* held = nullptr);
  // One `run` of the candidate on trial `in` (its process makes the inputs from the trial's seed;
  // the GPU's lock held shared; profiled: exclusive, in *held when given), outputs to `out`.
  Reply run_on_trial(Worker& w, DeviceState& dev, const TrialInput& in, const std::filesystem::path& out, double timeout_s,
                     bool profile_kernels, std::optional<GpuUse>* held = nullptr);
  // The judge's static audit of the source (compile_error before any candidate code runs;
  // r.evidence["source_audit"] keeps its kernel names and after-correctness finding), then load.
  bool load_candidate(size_t i, Worker& w, DeviceState& dev, CandidateResult& r);
  // GPU only: the profiled run's kernels (the last trial's); the judge classifies them against the
  // audit's @triton.jit names (no_triton_kernel / torch_fallback in strict; shares reported).
  void check_kernel_profile(DeviceState& dev, CandidateResult& r, const Json& facts);
  // The profiled run's and its check's round trips and steps, as r.evidence["profiled_steps_ms"].
  static void note_profiled_steps(CandidateResult& r, const Reply& run, const Reply& cmp);
  // After a timed_output_mismatch: the failing timing set once more, untimed, compared in full
  // (timing_steps.cpp).
  void recheck_timing_set(Worker& w, DeviceState& dev, CandidateResult& r);
  // After a crash or sticky CUDA error on a GPU: health-check it in a fresh process and stop
  // using it when unhealthy (never reset). Records the result in r.evidence.
  void check_gpu_after_fault(DeviceState& dev, CandidateResult& r);
  bool fail_from_reply(const Reply& reply, const std::string& phase, double timeout_s, Worker& w, DeviceState& dev,
                       CandidateResult& r);
  // The CPU a timed batch on `dev` runs on (VerifyOptions::timing_cpu); -1: none.
  int timing_cpu(const DeviceState& dev) const;
  // timed_calls.cpp: timing clocked here, one request per round trip of calls (docs/verification.md,
  // Timing). One timed batch of `iters` round trips (after the warmup ones) of dev.calls_per_trip
  // calls each (or `per_trip` when given) over the timing sets on `cand` (nullptr: the reference,
  // on the judge). `paired` (a candidate's): each round trip followed by one of the reference on
  // the same sets (TimingResult::paired_ref_ms). A candidate's failure or wrong value in the
  // output region is its verdict in *r; nullopt then. `fresh_loads` (the reference's): the judge
  // makes each round trip's sets from their seeds, clocked as dev.load_baseline_ms, the baselines
  // of unpaired candidate batches' loads; else it copies the sets it kept as made.
  // `whole_after` (a paired batch's; nullptr: compared in the batch): the whole-output check of
  // the last round trip is left for after the exclusive hold (check_whole_after), on a copy the
  // judge takes with the candidate stopped.
  std::optional<TimingResult> timed_batch(DeviceState& dev, Worker* cand, int iters, bool compile, CandidateResult* r,
                                          int per_trip = 0, bool paired = false, bool fresh_loads = false,
                                          WholeCheckAfter* whole_after = nullptr);
  // The whole-output check timed_batch left for after the hold (under a shared one): the copy of
  // the last round trip's outputs against the full references and the cheat rules. False with
  // the verdict in r (timed_output_mismatch with evidence timed_mismatch_set, or not_verified);
  // then the idle baseline the batch set is dropped too, still under the hold. (On a CPU a shared
  // hold takes nothing: the check may come between another thread's round trips there, whose
  // times mean nothing anyway.)
  bool check_whole_after(DeviceState& dev, Worker& w, CandidateResult& r, const WholeCheckAfter& whole);
  // The load baselines select's unpaired batches of `iters` round trips are clocked against: a
  // reference batch that makes its sets from their seeds, unless one did (timing_steps.cpp).
  void ensure_load_baselines(DeviceState& dev, int iters);
  // timing_steps.cpp: what is timed when.
  // Times a correct candidate under the GPU's exclusive lock (the one in *held when it holds one,
  // released after the timed batch); sets r.timing and r.speedup, or the verdict of what went wrong.
  void time_candidate(Worker& w, DeviceState& dev, CandidateResult& r, std::optional<GpuUse>* held = nullptr);
  // Readies the reference's timing once per device: the calls per round trip (its kernel time, or
  // a probe of a few round trips under an exclusive taking of its own) and its timing sets. It has
  // no batch of its own: the device's first paired batch to pass its whole-output check gives its
  // published timing (reference_from_paired). With --time-compile, the torch.compile batch, whose
  // exclusive hold is left in `held` when given (empty on entry) for the caller to go on in.
  void ensure_reference_timing(DeviceState& dev, std::optional<GpuUse>* held = nullptr);
  // The sets a reference batch of `iters` timed round trips of `per` calls uses, made by the judge
  // (references, fingerprints, tolerances) under the shared hold, before the exclusive one.
  // Under shared holds, a few round trips' sets a request; false when `stop` was set first.
  // whole_last: the judge keeps the whole references of the batch's last round trip's sets (a
  // candidate's batch compares its outputs there whole; not the probe's).
  bool prepare_reference_sets(DeviceState& dev, int iters, int per, const std::atomic<bool>* stop = nullptr,
                              bool whole_last = true);
  // Everything of the reference's timing before its last batch (timing_steps.cpp).
  bool prepare_reference_timing(DeviceState& dev, const std::atomic<bool>* stop);
  // The judge makes the profiled (last) trial's references under a shared hold.
  void premake_profiled_trial(DeviceState& dev, const std::atomic<bool>* stop);
  std::optional<double> reference_kernel_ms(DeviceState& dev, const std::atomic<bool>* stop);
  // That preparation on a thread of its own, once per device (its first candidate not answered from the cache).
  void start_reference_timing(DeviceState& dev);
  // Stops and joins those threads (no candidate is left to use them).
  void stop_reference_timing();
  // timeline_ms[what] = now, unless already set (reference_prepare_started, reference_prepared,
  // reference_batch_started: the first device's).
  void mark(const std::string& what);
  // Whether a background preparation should stop (`stop` set, or the call cancelled).
  bool stopped(const std::atomic<bool>* stop) const;
  // Round trips of a timed batch: the options' on a GPU; on CPU (times not meaningful) 3 and 1 warmup.
  int timed_calls(const DeviceState& dev) const { return dev.cuda() ? opts_.iters : 3; }
  int warmup_calls(const DeviceState& dev) const { return dev.cuda() ? opts_.warmup : 1; }
  double run_timeout_s(const DeviceState& dev) const;

  // multishape.cpp
  void run_multishape();  // after the worker threads: notes of the candidates not checked
  void declare_variants(DeviceState& dev);  // the size variants' states and directories, no judge yet
  // Starts dev's judge process unless it has one; does not wait. by_exec: not through the zygote.
  Status spawn_judge(DeviceState& dev, bool by_exec = false);
  // spawn_judge, then its greeting: a forked judge that does not greet is forked again, then
  // started by exec. On the thread that is to outlive the judge.
  Status start_judge(DeviceState& dev);
  void note_exec_start(const std::string& why);  // keeps the first reason a worker started by exec
  // With reuse_judges: the pool's key for dev's judge (the interpreter, the package, the device,
  // and whether it serves size variants: their process has other settings).
  std::string judge_pool_key(const DeviceState& dev) const;
  // At the end of a call: dev's judge released into the pool when it may be kept (reuse_judges,
  // forked, every device it served healthy, its release reusable), else ended.
  void end_or_keep_judge(DeviceState& dev);
  static constexpr double kZygoteStartS = 180;   // its imports, on a loaded host
  void setup_variants(DeviceState& dev);
  // The variant judges start and load the problem on a thread of their own, started by the first
  // candidate that matched its first trial (nothing is spent on variants before); wait_variants
  // waits for it.
  void start_variants();
  void wait_variants();
  // Lets variants_thread_ end and joins it: at the call's end, before any judge is ended or kept
  // (or at destruction).
  void release_variants();
  // The check of a candidate just found correct (and timed) on `dev`, in its own process `w`: each
  // size variant's ModelNew constructed there in turn (load_variant) and its trials judged by the
  // variant's judge. Sets r.multishape or r.multishape_note.
  void check_shapes(Worker& w, DeviceState& dev, CandidateResult& r);
  // The `load_variant` request of one size variant `v` to a candidate already loaded.
  bool load_variant(Worker& w, DeviceState& v, CandidateResult& r);
  Json load_request(const DeviceState& dev, const char* op) const;
  // Sends a load request under the GPU's shared hold; false with the verdict in r when it failed.
  // With `steps`, adds where its time went (the hold's wait, the request, the worker's steps).
  bool send_load(Worker& w, DeviceState& dev, const Json& req, const std::string& phase, CandidateResult& r,
                 Json* steps = nullptr);

  // select.cpp
  void select();

  std::string problem_path_;
  std::vector<std::string> candidate_paths_;
  VerifyOptions opts_;
  VerifyReport report_;
  std::string reference_source_;
  std::string reference_b64_;  // the problem's text for candidates' load requests (their get_inputs)
  std::vector<std::string> sources_, source_errors_;
  PythonEnv py_;
  std::filesystem::path package_dir_;
  Sandbox sandbox_;
  std::shared_ptr<Zygote> zygote_;  // forks the workers (nullptr: each starts by exec)
  std::string exec_note_;           // why a worker last started by exec instead (guarded by exec_note_mu_)
  std::mutex exec_note_mu_;
  std::filesystem::path run_dir_;
  uint64_t secret_seed_ = 0;  // sent to judges only
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::unique_ptr<ResultCache> cache_;
  // The feed (open_feed): slots [0, arrived_) of candidate_paths_, sources_, source_errors_ and
  // report_.candidates are filled (sized to the capacity up front, so a worker's reference to its
  // slot stays valid while others arrive); next_candidate_ is the next slot a worker takes.
  std::mutex feed_mu_;
  std::condition_variable feed_cv_;
  size_t next_candidate_ = 0, arrived_ = 0, capacity_ = 0;
  bool closed_ = true;
  bool abandoned_ = false;  // destroyed without close_feed(): candidates not yet taken are not verified
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> worker_seq_{0};
  std::atomic<int> judges_started_{0};  // report_.judges_started
  std::atomic<int> judges_reused_{0};   // report_.judges_reused
  int jobs_ = 1;
  std::vector<std::unique_ptr<Worker>> prewarmed_;  // per worker thread, started during setup
  std::mutex warn_mu_;
  std::mutex notify_mutex_;
  std::once_flag variants_once_;
  std::thread variants_thread_;
  std::mutex ref_threads_mu_;
  std::vector<std::thread> ref_threads_;  // start_reference_timing's
  std::atomic<bool> ref_stop_{false};
  std::mutex variants_mu_;
  std::condition_variable variants_cv_;
  bool variants_loaded_ = false;
  bool variants_released_ = false;  // release_variants: variants_thread_ may end
  std::chrono::steady_clock::time_point t_start_ = std::chrono::steady_clock::now();
  GpuUseStats gpu_use_;  // the report's gpu_use
  OpStats judge_ops_;    // the report's judge_ms
  GpuUse use_gpu(DeviceState& dev, GpuGuard::Mode mode, std::string what) {
    return GpuUse(dev, mode, std::move(what), gpu_use_);
  }
  double ms_from_start() const;
};

}  // namespace kernelllm::harness
