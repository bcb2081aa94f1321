// The per-GPU reader-writer lock of the verifier, shared by every kernelllm process of a host:
// correctness runs hold it shared, timing holds it exclusively, so that two `kernelllm verify`
// or `eval --shard` processes on one GPU never time while the other runs. In-process threads
// take the DeviceState's shared_mutex first, then an flock on a per-GPU file (each acquisition
// opens its own descriptor, close-on-exec, so children never inherit it).
#pragma once

#include <filesystem>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace kernelllm::harness {

// /tmp/kernelllm-gpu-locks/<id>.lock where <id> is the physical GPU: cuda:N mapped through
// CUDA_VISIBLE_DEVICES (its N-th entry) when that is set, else N. Empty for "cpu".
std::filesystem::path gpu_lock_file(std::string_view device_name);

class GpuGuard {
 public:
  enum class Mode { shared, exclusive };
  // Blocks until both locks are held. An flock that cannot be taken (unwritable lock dir)
  // leaves the in-process lock alone in force; `cross_process()` says which.
  GpuGuard(std::shared_mutex& mu, const std::filesystem::path& file, Mode mode);
  ~GpuGuard();
  GpuGuard(const GpuGuard&) = delete;
  GpuGuard& operator=(const GpuGuard&) = delete;
  bool cross_process() const { return fd_ >= 0; }

 private:
  std::shared_mutex& mu_;
  Mode mode_;
  int fd_ = -1;
};

}  // namespace kernelllm::harness
