// The per-GPU reader-writer lock of the verifier, shared by every kernelllm process of a host:
// correctness runs hold it shared, timing holds it exclusively, so that two `kernelllm verify`
// or `eval --shard` processes on one GPU never time while the other runs. In-process threads
// take the DeviceState's GpuMutex first, then an flock on a per-GPU file (each acquisition
// opens its own descriptor, close-on-exec, so children never inherit it).
// A waiting exclusive taker goes before shared takers that come after it, in the process and
// across processes: a turnstile in front of each lock (a mutex; an flock on "<file>.intent")
// that a shared taker only passes through and an exclusive taker holds until it has the lock.
// Without it timing waited for a moment when no correctness work held the lock: in the labelled
// suite's relu call (81 candidates, 32 workers, H200) a candidate's timing phase took a median of
// 291 s, of which its timed calls took ~1 s. So a thread never takes a GpuGuard while it holds one.
// An engine writing on the GPU beside the verifier (GpuShare, verify.h) holds "<file>.engine"
// shared; an exclusive taker takes that file first, before the turnstile, so that timing waits
// for the engine while correctness runs go on.
// The turnstile alone made a convoy: a timer waited for every shared holder to finish (a
// candidate's load or first run compiles for seconds) while every later shared taker waited
// behind it, and the GPU idled (bench/results/verify-throughput-h100.json). So an exclusive taker
// may ask holders to yield while it waits (`ask_yield`: in the process a counter, across processes
// an OFD read lock on "<file>.yield"); a holder whose candidate's request overruns stops that
// candidate's processes, lets the lock go once the GPU is idle, and takes it back after the timer
// (GpuUse::yield_for_timer, verifier.h).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace kernelllm::harness {

class LockClock;

// The physical GPU of "cuda:N": N mapped through CUDA_VISIBLE_DEVICES (its N-th entry: an index
// or a UUID) when that is set, else N. Empty for "cpu".
std::string physical_gpu_id(std::string_view device_name);
// /tmp/kernelllm-gpu-locks/gpu-<id>.lock, <id> the physical GPU. Empty for "cpu".
std::filesystem::path gpu_lock_file(std::string_view device_name);

// The in-process part: a turnstile in front of a reader-writer lock.
struct GpuMutex {
  std::mutex turnstile;
  std::shared_mutex rw;
  std::atomic<int> yield_asked{0};  // exclusive takers of this process waiting with ask_yield
};

class GpuGuard {
 public:
  enum class Mode { shared, exclusive };
  // Blocks until both locks are held. An flock that cannot be taken (unwritable lock dir)
  // leaves the in-process lock alone in force; `cross_process()` says which.
  // `ask_yield` (exclusive only): shared holders are asked to yield while this one waits
  // (yield_wanted), from after the engine's lock until the lock is held.
  GpuGuard(GpuMutex& mu, const std::filesystem::path& file, Mode mode, bool ask_yield = false);
  ~GpuGuard();
  GpuGuard(const GpuGuard&) = delete;
  GpuGuard& operator=(const GpuGuard&) = delete;
  bool cross_process() const { return fd_ >= 0; }
  Mode mode() const { return mode_; }
  // A shared hold: how long it has gone on while a timer (an exclusive taker of this process)
  // waited for it, up to now (gpu_lock_times); 0 when none waits.
  double timer_waited_ms() const;
  // Whether an exclusive taker waits and asks holders to yield: one of this process (`mu`), or of
  // any process through `yield_fd` (open_yield_file; -1: this process only).
  static bool yield_wanted(const GpuMutex& mu, int yield_fd);
  // A descriptor of "<file>.yield" for yield_wanted (close-on-exec; -1 when it cannot be opened).
  static int open_yield_file(const std::filesystem::path& file);

 private:
  GpuMutex& mu_;
  Mode mode_;
  int fd_ = -1;
  int engine_fd_ = -1;  // exclusive: "<file>.engine", which an engine writing on the GPU holds shared
  LockClock* clock_ = nullptr;  // this lock's in gpu_lock_times (none for the CPU)
  std::chrono::steady_clock::time_point taken_at_;
};

// One candidate CUDA context made at a time per GPU, across threads and processes (an flock on
// "<file>.contexts", each turn its own descriptor), taken before the GPU's lock. The driver makes
// contexts one at a time for the host anyway; made under shared holds all at once, each waited in
// the driver while holding the lock, and a timer waited for all of them. Nothing for the CPU.
class ContextTurn {
 public:
  explicit ContextTurn(const std::filesystem::path& file);
  ~ContextTurn();
  ContextTurn(const ContextTurn&) = delete;
  ContextTurn& operator=(const ContextTurn&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace kernelllm::harness
