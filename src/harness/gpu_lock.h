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
#pragma once

#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace kernelllm::harness {

// The physical GPU of "cuda:N": N mapped through CUDA_VISIBLE_DEVICES (its N-th entry: an index
// or a UUID) when that is set, else N. Empty for "cpu".
std::string physical_gpu_id(std::string_view device_name);
// /tmp/kernelllm-gpu-locks/gpu-<id>.lock, <id> the physical GPU. Empty for "cpu".
std::filesystem::path gpu_lock_file(std::string_view device_name);

// The in-process part: a turnstile in front of a reader-writer lock.
struct GpuMutex {
  std::mutex turnstile;
  std::shared_mutex rw;
};

class GpuGuard {
 public:
  enum class Mode { shared, exclusive };
  // Blocks until both locks are held. An flock that cannot be taken (unwritable lock dir)
  // leaves the in-process lock alone in force; `cross_process()` says which.
  GpuGuard(GpuMutex& mu, const std::filesystem::path& file, Mode mode);
  ~GpuGuard();
  GpuGuard(const GpuGuard&) = delete;
  GpuGuard& operator=(const GpuGuard&) = delete;
  bool cross_process() const { return fd_ >= 0; }
  Mode mode() const { return mode_; }

 private:
  GpuMutex& mu_;
  Mode mode_;
  int fd_ = -1;
  int engine_fd_ = -1;  // exclusive: "<file>.engine", which an engine writing on the GPU holds shared
};

}  // namespace kernelllm::harness
