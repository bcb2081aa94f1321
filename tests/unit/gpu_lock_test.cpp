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
#include <fstream>
#include <string>
#include <thread>

#include "harness/gpu_lock.h"
#include "harness/verifier.h"
#include "kernelllm/harness/verify.h"

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

TEST(GpuLock, AGpuShareHoldsTimingOffUntilItIsGone) {
  // A GPU of its own name, so that no verifier on this machine shares its lock file.
  ::setenv("CUDA_VISIBLE_DEVICES", ("GPU-share-test-" + std::to_string(::getpid())).c_str(), 1);
  { GpuShare on_cpu("cpu"); }  // nothing to hold
  auto share = std::make_unique<GpuShare>("cuda:0");
  GpuMutex mu;  // a verifier's own, as timing takes it
  std::atomic<bool> timed{false};
  std::thread timing([&] {
    GpuGuard g(mu, gpu_lock_file("cuda:0"), GpuGuard::Mode::exclusive);
    timed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(timed.load()) << "timing took the GPU while the engine held it";
  // Correctness runs go on while timing waits for the engine (it is not in the turnstile yet).
  std::atomic<bool> checked{false};
  std::thread correctness([&] {
    GpuGuard g(mu, gpu_lock_file("cuda:0"), GpuGuard::Mode::shared);
    checked = true;
  });
  for (int i = 0; i < 100 && !checked.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(checked.load()) << "a correctness run waited for the engine behind the waiting timing";
  share.reset();
  correctness.join();
  timing.join();
  EXPECT_TRUE(timed.load());
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
    GpuMutex child_mu;
    const auto t0 = Clock::now();
    { GpuGuard g(child_mu, file, child_mode); }
    const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    byte = static_cast<char>(std::min(255.0, ms / 10));
    (void)!::write(done[1], &byte, 1);
    ::_exit(0);
  }
  GpuMutex mu;
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

// The most threads inside at once when two threads each hold `Hold` (made by `take`) 20 times for 1 ms.
template <class Take>
int most_inside_at_once(Take take) {
  std::atomic<int> inside{0}, most{0};
  auto work = [&] {
    for (int i = 0; i < 20; ++i) {
      auto held = take();
      int now = ++inside;
      int prev = most.load();
      while (now > prev && !most.compare_exchange_weak(prev, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --inside;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  return most.load();
}

TEST(GpuLock, ThreadsOfOneProcessExcludeLikeASharedMutex) {
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-t-" + std::to_string(::getpid()) + ".lock");
  GpuMutex mu;
  EXPECT_EQ(most_inside_at_once([&] { return std::make_unique<GpuGuard>(mu, file, GpuGuard::Mode::exclusive); }), 1);
  std::filesystem::remove(file);
}

TEST(GpuLock, ContextTurnsAreOneAtATimeAcrossThreadsAndProcesses) {
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-turn-" + std::to_string(::getpid()) + ".lock");
  EXPECT_EQ(most_inside_at_once([&] { return std::make_unique<ContextTurn>(file); }), 1);
  // Another process waits for a turn this one holds; a GPU lock's holders are not in its way.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    {
      ContextTurn turn(file);
      GpuMutex mu;
      GpuGuard other(mu, file, GpuGuard::Mode::exclusive);  // the GPU lock itself is free to take
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(2);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
    }
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const auto t0 = Clock::now();
  { ContextTurn turn(file); }
  const double waited = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GE(waited, 250) << "a turn was taken while another process held it";
  ContextTurn none{std::filesystem::path()};  // the CPU: nothing to take
  for (const char* suffix : {"", ".contexts", ".intent", ".engine"}) {
    std::filesystem::path f = file;
    f += suffix;
    std::filesystem::remove(f);
  }
}

TEST(GpuLock, ItsTimeIsSplitByWhoHeldItAndWhoWaited) {
  // gpu_lock_times: a shared hold (~80 ms), a timer waiting for it (the last ~40 ms: draining),
  // the timer's hold (~60 ms), then nothing. The process-wide clock of this lock file alone.
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-c-" + std::to_string(::getpid()) + ".lock");
  const std::string name = file.stem().string();
  GpuMutex mu;
  auto shared = std::make_unique<GpuGuard>(mu, file, GpuGuard::Mode::shared);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  std::thread timer([&] {
    GpuGuard g(mu, file, GpuGuard::Mode::exclusive, /*ask_yield=*/true);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_NEAR(shared->timer_waited_ms(), 40, 25) << "the shared hold went on while the timer waited";
  shared.reset();
  timer.join();
  {
    GpuGuard again(mu, file, GpuGuard::Mode::shared);
    EXPECT_EQ(again.timer_waited_ms(), 0) << "no timer waits";
  }
  const Json t = gpu_lock_times().value(name, Json::object());
  ASSERT_TRUE(t.contains("span_ms")) << gpu_lock_times().dump();
  EXPECT_NEAR(t["shared_ms"].get<double>(), 40, 25) << t.dump();
  EXPECT_NEAR(t["draining_ms"].get<double>(), 40, 25) << t.dump();
  EXPECT_NEAR(t["exclusive_ms"].get<double>(), 60, 25) << t.dump();
  EXPECT_EQ(t["drains"].get<long>(), 1) << t.dump();
  EXPECT_NEAR(t["span_ms"].get<double>(), t["shared_ms"].get<double>() + t["draining_ms"].get<double>() +
                                              t["exclusive_ms"].get<double>() + t["free_ms"].get<double>(), 1e-6);
  EXPECT_FALSE(gpu_lock_times().contains("")) << "the CPU has no lock to clock";
  std::filesystem::remove(file);
}

TEST(GpuLock, AVerifyCallCountsItsTakingsByPurpose) {
  // The report's gpu_use: takings, waits and holds by purpose; correctness work on the CPU takes
  // nothing, timing there still takes the device's own lock.
  ::setenv("CUDA_VISIBLE_DEVICES", ("GPU-use-test-" + std::to_string(::getpid())).c_str(), 1);
  DeviceState gpu, cpu;
  gpu.name = "cuda:0";
  gpu.gpu_lock = gpu_lock_file("cuda:0");
  cpu.name = "cpu";
  GpuUseStats stats;
  { GpuUse on_cpu(cpu, GpuGuard::Mode::shared, "run", stats); }
  { GpuUse timing_on_cpu(cpu, GpuGuard::Mode::exclusive, "cpu timing", stats); }
  std::thread waiter;
  {
    GpuUse run(gpu, GpuGuard::Mode::shared, "run", stats);
    waiter = std::thread([&] { GpuUse timing(gpu, GpuGuard::Mode::exclusive, "timing", stats); });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the timing waits for this run
  }
  waiter.join();
  { GpuUse run(gpu, GpuGuard::Mode::shared, "run", stats); }
  const Json j = stats.to_json();
  ASSERT_TRUE(j.contains("run") && j.contains("timing") && j.contains("cpu timing")) << j.dump();
  EXPECT_EQ(j["run"]["n"], 2) << j.dump();  // the CPU's run took nothing
  EXPECT_EQ(j["run"]["mode"], "shared");
  EXPECT_GE(j["run"]["max_hold_ms"].get<double>(), 140.0);
  EXPECT_EQ(j["timing"]["mode"], "exclusive");
  EXPECT_GE(j["timing"]["wait_ms"].get<double>(), 100.0) << j.dump();
  EXPECT_NEAR(stats.exclusive_hold_ms(), j["timing"]["hold_ms"].get<double>() + j["cpu timing"]["hold_ms"].get<double>(), 1e-9);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(GpuLock, AnExclusiveHoldGoesOnToOtherWorkWithoutLettingTheGpuGo) {
  // A candidate's profiled run and its timing in one taking of the GPU (evaluate.cpp): each part
  // counted under its own purpose, and a shared taker waiting meanwhile gets in only after both.
  ::setenv("CUDA_VISIBLE_DEVICES", ("GPU-continue-test-" + std::to_string(::getpid())).c_str(), 1);
  DeviceState gpu;
  gpu.name = "cuda:0";
  gpu.gpu_lock = gpu_lock_file("cuda:0");
  GpuUseStats stats;
  std::atomic<bool> ran{false};
  std::thread other;
  {
    std::optional<GpuUse> held;
    held.emplace(gpu, GpuGuard::Mode::exclusive, "profiled run", stats);
    other = std::thread([&] {
      GpuUse run(gpu, GpuGuard::Mode::shared, "run", stats);
      ran = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    held->continue_as("timing");
    EXPECT_EQ(held->wait_ms(), 0.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    EXPECT_FALSE(ran.load());  // the GPU was never let go between the two
  }
  other.join();
  EXPECT_TRUE(ran.load());
  const Json j = stats.to_json();
  ASSERT_TRUE(j.contains("profiled run") && j.contains("timing") && j.contains("run")) << j.dump();
  EXPECT_EQ(j["profiled run"]["n"], 1);
  EXPECT_EQ(j["timing"]["n"], 1);
  EXPECT_GE(j["profiled run"]["hold_ms"].get<double>(), 110.0) << j.dump();
  EXPECT_GE(j["timing"]["hold_ms"].get<double>(), 110.0) << j.dump();
  EXPECT_EQ(j["timing"]["wait_ms"].get<double>(), 0.0);
  EXPECT_GE(j["run"]["wait_ms"].get<double>(), 220.0) << j.dump();
  EXPECT_NEAR(stats.exclusive_hold_ms(), j["profiled run"]["hold_ms"].get<double>() + j["timing"]["hold_ms"].get<double>(),
              1e-9);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

// The state letter of a process in /proc ('T': stopped), '?' when it is gone.
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return '?';
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// A GPU of its own name (no verifier on this machine shares its lock file) and a stand-in
// candidate process that sleeps.
Result<Process> yield_test_setup(const std::string& gpu_name, DeviceState& gpu) {
  ::setenv("CUDA_VISIBLE_DEVICES", (gpu_name + std::to_string(::getpid())).c_str(), 1);
  gpu.name = "cuda:0";
  gpu.gpu_lock = gpu_lock_file("cuda:0");
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 100"};
  o.env = {"PATH=/usr/bin:/bin", "KERNELLLM_WORKER=1"};
  o.protocol_fds = false;
  return Process::spawn(o);
}

TEST(GpuLock, AnOverrunningHoldYieldsToAWaitingTimerWhenTheGpuIsIdle) {
  // A candidate's request holds the GPU shared for seconds (a first compile); a timer asks for it.
  // The hold stops the candidate, lets the lock go, takes it back after the timer and continues
  // the candidate, which lost nothing but the time it was stopped. Without yielding the timer
  // waited the whole request, and every later shared taker behind it (the convoy).
  DeviceState gpu;
  auto cand = yield_test_setup("GPU-yield-test-", gpu);
  ASSERT_TRUE(cand.ok());
  GpuUseStats stats;
  std::atomic<bool> timer_holds{false}, done{false};
  std::atomic<char> state_while_timed{'?'};
  std::atomic<int> idle_looks{0};
  double stopped_s = 0;
  std::thread holder([&] {
    GpuUse run(gpu, GpuGuard::Mode::shared, "load", stats);
    const auto until = Clock::now() + std::chrono::seconds(3);  // the request's 3 s
    while (Clock::now() < until && !done.load()) {
      stopped_s += run.yield_for_timer(*cand, [&](const std::function<bool()>& stop) {
        ++idle_looks;
        return stop() ? GpuIdle::idle : GpuIdle::busy;
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Another process's view of the ask: its own mutex, the same lock file.
  GpuMutex other_process;
  const int yield_fd = GpuGuard::open_yield_file(gpu.gpu_lock);
  ASSERT_GE(yield_fd, 0);
  EXPECT_FALSE(GpuGuard::yield_wanted(other_process, yield_fd)) << "asked with no timer waiting";
  std::atomic<bool> seen_asked{false};
  std::thread watcher([&] {
    for (int i = 0; i < 200 && !timer_holds.load(); ++i) {
      if (GpuGuard::yield_wanted(other_process, yield_fd)) seen_asked = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  double timer_wait_ms = 0;
  {
    GpuUse timing(gpu, GpuGuard::Mode::exclusive, "timing", stats);
    timer_holds = true;
    timer_wait_ms = timing.wait_ms();
    state_while_timed = proc_state(cand->pid());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(proc_state(cand->pid()), 'T') << "the candidate ran while the timer held the GPU";
  }
  watcher.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(proc_state(cand->pid()), 'T') << "the candidate was not continued after the timer";
  EXPECT_FALSE(GpuGuard::yield_wanted(other_process, yield_fd)) << "still asked after the timer took the lock";
  done = true;
  holder.join();
  ::close(yield_fd);
  EXPECT_LT(timer_wait_ms, 1000) << "the timer waited for the whole request";
  EXPECT_EQ(state_while_timed.load(), 'T');
  EXPECT_TRUE(seen_asked.load()) << "another process could not see the timer asking";
  EXPECT_GE(idle_looks.load(), 1);
  EXPECT_GE(stopped_s, 0.25) << "the time stopped is what extends the request's deadline";
  const Json j = stats.to_json();
  EXPECT_EQ(j["load"]["yields"], 1) << j.dump();
  EXPECT_GE(j["load"]["yield_ms"].get<double>(), 250.0) << j.dump();
  cand->kill_tree();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(GpuLock, AHoldKeepsTheGpuWhileItStaysBusy) {
  // A candidate whose kernel does not end keeps the GPU busy after it is stopped: timing beside it
  // would be timing beside someone else's work. The hold keeps the lock then (the timer waits to
  // its end, as without yielding), looks kMaxBusy times at most (kBusyBackoffS apart), and the
  // candidate runs meanwhile.
  DeviceState gpu;
  auto cand = yield_test_setup("GPU-busy-test-", gpu);
  ASSERT_TRUE(cand.ok());
  GpuUseStats stats;
  std::atomic<int> looks{0};
  std::atomic<bool> released{false};
  double stopped_total = 0;
  std::atomic<int> not_now{0};
  std::thread holder([&] {
    GpuUse run(gpu, GpuGuard::Mode::shared, "run", stats);
    while (!GpuGuard::yield_wanted(gpu.gpu_mu, -1)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // (held kYieldAfterMs by now)
    // A judge busy with something else: nothing stopped, not counted toward the cap, no back-off:
    // looked at again at the next poll, however many times.
    for (int i = 0; i < 2 * GpuUse::kMaxBusy; ++i) {
      EXPECT_EQ(run.yield_for_timer(*cand, [&](const std::function<bool()>&) {
        ++not_now;
        return GpuIdle::not_now;
      }), 0.0);
      EXPECT_NE(proc_state(cand->pid()), 'T');
    }
    // Long enough for kMaxBusy looks kBusyBackoffS apart, and then some.
    const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int>((GpuUse::kMaxBusy + 2) * GpuUse::kBusyBackoffS * 1e3));
    while (Clock::now() < until) {
      // Each look stops the candidate first; the time stopped is the request's (credited).
      const double stopped = run.yield_for_timer(*cand, [&](const std::function<bool()>& stop) {
        ++looks;
        EXPECT_TRUE(stop());
        return GpuIdle::busy;
      });
      EXPECT_GE(stopped, 0.0);
      stopped_total += stopped;

      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_NE(proc_state(cand->pid()), 'T') << "left stopped after a busy look";
    released = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  {
    GpuUse timing(gpu, GpuGuard::Mode::exclusive, "timing", stats);
    EXPECT_TRUE(released.load()) << "the timer went in while the GPU was busy";
  }
  holder.join();
  EXPECT_EQ(not_now.load(), 2 * GpuUse::kMaxBusy) << "a look that could not be made was skipped or backed off";
  EXPECT_EQ(looks.load(), GpuUse::kMaxBusy);
  EXPECT_GT(stopped_total, 0.0) << "a busy look's stop was not credited to the request";
  EXPECT_FALSE(stats.to_json()["run"].contains("yields"));
  cand->kill_tree();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(GpuLock, ARequestWaitsLongerByTheTimeItsProcessWasStopped) {
  // Worker::request's `between` hook (GpuUse::yield_for_timer) is called while the reply is
  // awaited; what it returns extends the deadline, so a candidate stopped for a timer is not
  // charged the time as a timeout. A worker that answers after 0.6 s, a 0.3 s deadline.
  const char* reply_late =
      "import json, os, time\n"
      "n = int.from_bytes(os.read(3, 4), 'little')\n"
      "m = json.loads(os.read(3, n))\n"
      "time.sleep(0.6)\n"
      "b = json.dumps({'ok': True, 'id': m['id'], 'op': m['op']}).encode()\n"
      "os.write(4, len(b).to_bytes(4, 'little') + b)\n";
  auto worker = [&] {
    Worker w;
    SpawnOptions o;
    o.argv = {"python3", "-c", reply_late};
    o.env = {"PATH=/usr/bin:/bin:/usr/local/bin", "KERNELLLM_WORKER=1"};
    auto p = Process::spawn(o);
    EXPECT_TRUE(p.ok());
    if (p.ok()) w.proc = std::move(*p);
    return w;
  };
  Worker plain = worker();
  EXPECT_EQ(plain.request(Json{{"op", "run"}}, 0.3).status, ReceiveStatus::timeout);
  Worker stopped = worker();
  int calls = 0;
  const Reply r = stopped.request(Json{{"op", "run"}}, 0.3, [&] {
    ++calls;
    return 0.1;  // as if stopped for 0.1 s since the last call
  });
  EXPECT_TRUE(r.ok()) << r.error << stopped.proc.stderr_tail();
  EXPECT_GE(calls, 4);
  EXPECT_GE(r.elapsed_ms, 550);
}

TEST(GpuLock, AWaitingExclusiveThreadGoesBeforeSharedThreadsThatComeLater) {
  // A shared holder; an exclusive taker waits for it; a shared taker that comes after the
  // exclusive one must not go first (else timing waits for a moment when no correctness work
  // holds the lock, which on a busy verifier may not come for minutes).
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-o-" + std::to_string(::getpid()) + ".lock");
  GpuMutex mu;
  std::atomic<int> order{0};
  int writer_at = -1, late_reader_at = -1;
  auto first = std::make_unique<GpuGuard>(mu, file, GpuGuard::Mode::shared);
  std::thread writer([&] {
    GpuGuard g(mu, file, GpuGuard::Mode::exclusive);
    writer_at = order++;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the writer is waiting now
  std::thread late_reader([&] {
    GpuGuard g(mu, file, GpuGuard::Mode::shared);
    late_reader_at = order++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(order.load(), 0) << "the late shared taker went in while an exclusive taker waited";
  first.reset();
  writer.join();
  late_reader.join();
  EXPECT_EQ(writer_at, 0);
  EXPECT_EQ(late_reader_at, 1);
  std::filesystem::remove(file);
  std::filesystem::remove(file.string() + ".intent");
}

TEST(GpuLock, AWaitingExclusiveProcessGoesBeforeSharedProcessesThatComeLater) {
  // The same across processes (the flock turnstile): the parent holds the lock shared for 600 ms;
  // a child asks for it exclusively at once and keeps it 400 ms; another asks for it shared
  // 200 ms later. That one gets it only after the exclusive child, about 1,000 ms in.
  auto file = std::filesystem::temp_directory_path() / ("kllm-gpu-lock-test-p-" + std::to_string(::getpid()) + ".lock");
  int go[2], done[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(done), 0);
  const auto t0 = Clock::now();
  auto child = [&](GpuGuard::Mode mode, int delay_ms, int hold_ms) {
    pid_t pid = ::fork();
    if (pid == 0) {
      char byte = 0;
      if (::read(go[0], &byte, 1) != 1) ::_exit(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      GpuMutex m;
      {
        GpuGuard g(m, file, mode);
        const auto at = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        byte = static_cast<char>(std::min(255.0, at / 10));
        (void)!::write(done[1], &byte, 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      }
      ::_exit(0);
    }
    return pid;
  };
  const pid_t writer = child(GpuGuard::Mode::exclusive, 0, 400);
  const pid_t reader = child(GpuGuard::Mode::shared, 200, 0);
  {
    GpuMutex mu;
    GpuGuard held(mu, file, GpuGuard::Mode::shared);
    ASSERT_TRUE(held.cross_process());
    const char go_byte[2] = {1, 1};
    (void)!::write(go[1], go_byte, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  unsigned char at[2] = {0, 0};
  ASSERT_EQ(::read(done[0], &at[0], 1), 1);
  ASSERT_EQ(::read(done[0], &at[1], 1), 1);
  int status = 0;
  ::waitpid(writer, &status, 0);
  ::waitpid(reader, &status, 0);
  for (int fd : {go[0], go[1], done[0], done[1]}) ::close(fd);
  // In the order they got the lock: the exclusive child at ~600 ms, the shared one at ~1,000 ms.
  EXPECT_GE(at[0] * 10, 500) << "the exclusive child got the lock while the parent held it";
  EXPECT_GE(at[1] * 10, 900) << "the late shared child went in before the waiting exclusive one";
  std::filesystem::remove(file);
  std::filesystem::remove(file.string() + ".intent");
}

}  // namespace
}  // namespace kernelllm::harness
