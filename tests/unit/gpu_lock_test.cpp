// The per-GPU lock shared across processes: lock file names (CUDA_VISIBLE_DEVICES mapping), an
// exclusive holder in one process blocks a shared taker in another, shared holders coexist.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "harness/gpu_lock.h"

namespace kernelllm::harness {
namespace {

using Clock = std::chrono::steady_clock;

TEST(GpuLock, FileNamesFollowThePhysicalDevice) {
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_TRUE(gpu_lock_file("cpu").empty());
  EXPECT_EQ(gpu_lock_file("cuda:1").filename(), "gpu-1.lock");
  EXPECT_EQ(gpu_lock_file("cuda").filename(), "gpu-0.lock");
  ::setenv("CUDA_VISIBLE_DEVICES", "3, 5", 1);
  EXPECT_EQ(gpu_lock_file("cuda:1").filename(), "gpu-5.lock");
  EXPECT_EQ(gpu_lock_file("cuda:0").filename(), "gpu-3.lock");
  ::setenv("CUDA_VISIBLE_DEVICES", "GPU-8a1b/x", 1);
  EXPECT_EQ(gpu_lock_file("cuda:0").filename(), "gpu-GPU-8a1b_x.lock");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

// A forked child waits for the parent to hold `parent_mode` (for `hold_ms`), then takes
// `child_mode`; returns how long the child waited in ms (-1 on failure). The child is forked
// before the parent opens its lock file, so that it holds no copy of the parent's descriptor.
double child_wait_ms(const std::filesystem::path& file, GpuGuard::Mode parent_mode, GpuGuard::Mode child_mode, int hold_ms) {
  int go[2], done[2];
  if (::pipe(go) != 0 || ::pipe(done) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    char byte = 0;
    if (::read(go[0], &byte, 1) != 1) ::_exit(1);
    std::shared_mutex child_mu;
    const auto t0 = Clock::now();
    { GpuGuard g(child_mu, file, child_mode); }
    const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    byte = static_cast<char>(std::min(255.0, ms / 10));
    (void)!::write(done[1], &byte, 1);
    ::_exit(0);
  }
  std::shared_mutex mu;
  bool held = false;
  {
    GpuGuard guard(mu, file, parent_mode);
    held = guard.cross_process();
    const char byte = 1;
    (void)!::write(go[1], &byte, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  }
  char byte = 0;
  const bool got = ::read(done[0], &byte, 1) == 1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
  return held && got ? static_cast<unsigned char>(byte) * 10.0 : -1;
}

TEST(GpuLock, ExclusiveHolderBlocksAnotherProcess) {
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-" + std::to_string(::getpid()) + ".lock");
  const double waited = child_wait_ms(file, GpuGuard::Mode::exclusive, GpuGuard::Mode::shared, 400);
  ASSERT_GE(waited, 0);
  EXPECT_GE(waited, 250) << "the child took the shared lock while the parent held it exclusively";
  std::filesystem::remove(file);
}

TEST(GpuLock, SharedHoldersDoNotBlockEachOther) {
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-s-" + std::to_string(::getpid()) + ".lock");
  const double waited = child_wait_ms(file, GpuGuard::Mode::shared, GpuGuard::Mode::shared, 1500);
  ASSERT_GE(waited, 0);
  EXPECT_LT(waited, 1000) << "a shared taker waited for another shared holder";
  std::filesystem::remove(file);
}

TEST(GpuLock, ThreadsOfOneProcessExcludeLikeASharedMutex) {
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-t-" + std::to_string(::getpid()) + ".lock");
  std::shared_mutex mu;
  std::atomic<int> inside{0}, max_inside{0};
  auto work = [&] {
    for (int i = 0; i < 20; ++i) {
      GpuGuard g(mu, file, GpuGuard::Mode::exclusive);
      int now = ++inside;
      int prev = max_inside.load();
      while (now > prev && !max_inside.compare_exchange_weak(prev, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --inside;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(max_inside.load(), 1);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace kernelllm::harness
