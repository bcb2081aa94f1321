// Subprocess layer: framing, ring buffers, deadlines, exit evidence and whole-tree kill
// (process groups, setsid grandchildren, orphans adopted by the subreaper).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/subprocess.h"

namespace kernelllm::harness {
namespace {

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  auto stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  size_t rp = stat->rfind(')');
  return rp != std::string::npos && stat->size() > rp + 2 && (*stat)[rp + 2] != 'Z';
}

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = {"PATH=/usr/bin:/bin", "KERNELLLM_WORKER=1"};
  return o;
}

TEST(RingBuffer, KeepsTheTailAndCountsEverything) {
  RingBuffer r(8);
  r.append("abc");
  EXPECT_EQ(r.str(), "abc");
  r.append("defghij");
  EXPECT_EQ(r.str(), "cdefghij");
  r.append("XY");
  EXPECT_EQ(r.str(), "efghijXY");
  r.append("0123456789");
  EXPECT_EQ(r.str(), "23456789");
  EXPECT_EQ(r.total_bytes(), 22u);
  EXPECT_TRUE(r.truncated());
}

TEST(Framing, RoundTripsInAnyChunking) {
  Json a{{"v", 1}, {"op", "run"}, {"x", "é"}};
  Json b{{"v", 1}, {"ok", true}};
  std::string bytes = encode_frame(a) + encode_frame(b);
  ASSERT_EQ(static_cast<unsigned char>(bytes[0]), a.dump().size());  // little-endian length
  FrameDecoder d;
  std::vector<Json> got;
  for (char c : bytes) {
    d.feed(std::string_view(&c, 1));
    auto m = d.next();
    ASSERT_TRUE(m.ok());
    if (m->has_value()) got.push_back(**m);
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], a);
  EXPECT_EQ(got[1], b);
}

TEST(Framing, RejectsOversizeAndNonObjectFrames) {
  FrameDecoder d(16);
  d.feed(std::string("\x11\x00\x00\x00", 4));
  auto m = d.next();
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("at most 16"), std::string::npos);
  FrameDecoder d2;
  d2.feed(std::string("\x03\x00\x00\x00[1]", 7));
  EXPECT_FALSE(d2.next().ok());
  FrameDecoder d3;
  d3.feed(std::string("\x03\x00\x00\x00{x}", 7));
  EXPECT_FALSE(d3.next().ok());
}

TEST(Process, EchoesFramesThroughFds3And4) {
  // cat copies fd 3 (requests) to fd 4 (replies) byte for byte.
  auto p = Process::spawn(sh("cat <&3 >&4"));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Json msg{{"v", 1}, {"op", "ping"}};
  ASSERT_TRUE(p->send(msg, deadline_in(5)).ok());
  Received r = p->receive(deadline_in(5));
  ASSERT_EQ(r.status, ReceiveStatus::ok) << r.error;
  EXPECT_EQ(r.message, msg);
}

TEST(Process, PassesDescriptorsBothWaysOverFd5) {
  // The child takes a pipe's write end from fd 5, writes through it, then sends back a memfd.
  SpawnOptions o;
  o.argv = {"python3", "-c",
            "import os, socket\n"
            "s = socket.socket(fileno=5)\n"
            "_, fds, _, _ = socket.recv_fds(s, 1, 4)\n"
            "os.write(fds[0], b'through the pipe')\n"
            "m = os.memfd_create('t')\n"
            "os.write(m, b'from the child')\n"
            "socket.send_fds(s, [b'F'], [m])\n"};
  const char* path = std::getenv("PATH");  // the python3 the tests run with
  o.env = {std::string("PATH=") + (path ? path : "/usr/bin:/bin")};
  o.fd_channel = true;
  auto p = Process::spawn(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ASSERT_TRUE(p->send_fd(pipe_fds[1], deadline_in(5)).ok());
  ::close(pipe_fds[1]);  // the child holds its own copy
  Result<int> back = p->receive_fd(deadline_in(30));
  if (!back.ok()) p->wait(deadline_in(5));  // for its stderr
  ASSERT_TRUE(back.ok()) << back.status().to_string() << p->stderr_tail();
  char buf[64] = {};
  ASSERT_EQ(::read(pipe_fds[0], buf, sizeof buf), 16);
  EXPECT_EQ(std::string(buf, 16), "through the pipe");
  char got[64] = {};
  ASSERT_EQ(::pread(*back, got, sizeof got, 0), 14);
  EXPECT_EQ(std::string(got, 14), "from the child");
  EXPECT_NE(::fcntl(*back, F_GETFD) & FD_CLOEXEC, 0);
  ::close(*back);
  ::close(pipe_fds[0]);
  auto e = p->wait(deadline_in(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 0) << p->stderr_tail();
}

TEST(Process, DescriptorChannelErrorsInsteadOfHangingOrSignalling) {
  // Nothing sent: receive_fd gives up at its deadline.
  SpawnOptions waits = sh("sleep 5");
  waits.fd_channel = true;
  auto p = Process::spawn(waits);
  ASSERT_TRUE(p.ok());
  const auto t0 = Clock::now();
  Result<int> none = p->receive_fd(deadline_in(0.3));
  EXPECT_FALSE(none.ok());
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  // A child that closed its end: an error, not a SIGPIPE that would end us.
  SpawnOptions closes = sh("exec 5>&-; sleep 5");
  closes.fd_channel = true;
  auto q = Process::spawn(closes);
  ASSERT_TRUE(q.ok());
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  Status sent;
  for (int i = 0; i < 50 && sent.ok(); ++i) {  // until the child's exec has closed fd 5
    sent = q->send_fd(pipe_fds[0], deadline_in(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(sent.ok());
  // A process spawned without the channel has none.
  auto r = Process::spawn(sh("sleep 5"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->send_fd(pipe_fds[0], deadline_in(1)).ok());
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(Process, RequestToAChildThatExitedIsAnErrorNotSigpipe) {
  // The child exits at once without reading (as a candidate that ends right after a reply): the
  // request's write meets a pipe without a reader. SIGPIPE's default action would end this test
  // process; the send must fail instead, and leave no SIGPIPE pending in this thread.
  auto p = Process::spawn(sh("exec 3<&-; exit 0"));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->wait(deadline_in(5)).has_value());
  Json big{{"op", "run"}, {"pad", std::string(100000, 'x')}};
  Status sent = p->send(big, deadline_in(2));
  EXPECT_FALSE(sent.ok());
  EXPECT_NE(sent.message().find("Broken pipe"), std::string::npos) << sent.to_string();
  sigset_t pending;
  sigemptyset(&pending);
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
}

TEST(Process, CapturesOutputTailsAndExitCode) {
  SpawnOptions o = sh("echo out; echo err >&2; exit 3");
  auto p = Process::spawn(o);
  ASSERT_TRUE(p.ok());
  auto e = p->wait(deadline_in(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->exited);
  EXPECT_EQ(e->code, 3);
  EXPECT_EQ(p->stdout_tail(), "out\n");
  EXPECT_EQ(p->stderr_tail(), "err\n");
  EXPECT_EQ(e->describe(), "exit code 3");
}

TEST(Process, ReportsTheKillingSignal) {
  auto p = Process::spawn(sh("kill -SEGV $$"));
  ASSERT_TRUE(p.ok());
  auto e = p->wait(deadline_in(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE(e->exited);
  EXPECT_EQ(e->signal, SIGSEGV);
  EXPECT_EQ(e->describe(), "killed by signal 11 (SIGSEGV)");
}

TEST(Process, ReceiveTimesOutAtTheDeadline) {
  auto p = Process::spawn(sh("sleep 100"));
  ASSERT_TRUE(p.ok());
  auto t0 = std::chrono::steady_clock::now();
  Received r = p->receive(deadline_in(0.3));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, ReceiveStatus::timeout);
  EXPECT_GE(s, 0.29);
  EXPECT_LT(s, 2.0);
}

TEST(Process, ClosedReplyPipeIsReportedNotHung) {
  auto p = Process::spawn(sh("exit 0"));
  ASSERT_TRUE(p.ok());
  Received r = p->receive(deadline_in(10));
  EXPECT_EQ(r.status, ReceiveStatus::closed);
}

TEST(Process, KillTreeTakesBackgroundChildrenAndSetsidGrandchildren) {
  // The grandchild leaves the process group (setsid) but keeps its parent chain.
  auto p = Process::spawn(sh("sleep 100 & echo $! >&4; setsid sh -c 'echo $$ >&4; sleep 100' & sleep 100"));
  ASSERT_TRUE(p.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<pid_t> tree = list_descendants(p->pid());
  ASSERT_GE(tree.size(), 3u);
  p->kill_tree();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (pid_t pid : tree) EXPECT_FALSE(alive(pid)) << "pid " << pid << " survived";
}

char state_of(pid_t pid) {
  auto stat = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return '?';
  size_t rp = stat->rfind(')');
  return rp != std::string::npos && stat->size() > rp + 2 ? (*stat)[rp + 2] : '?';
}

TEST(Process, PauseStopsTheWholeTreeAndResumeContinuesIt) {
  // A timed candidate's process is stopped between its round trips (timed_calls.cpp): nothing of
  // it may run then, a background child or a setsid grandchild included.
  const std::string file = ::testing::TempDir() + "/kllm-pause-" + std::to_string(::getpid());
  std::remove(file.c_str());
  auto p = Process::spawn(sh("(while :; do echo x >> " + file + "; sleep 0.01; done) & setsid sh -c 'while :; do echo y >> " +
                             file + "; sleep 0.01; done' & sleep 100"));
  ASSERT_TRUE(p.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto size = [&] {
    auto t = read_text_file(file);
    return t.ok() ? t->size() : size_t{0};
  };
  std::vector<pid_t> tree = list_descendants(p->pid());
  ASSERT_GE(tree.size(), 3u);
  ASSERT_TRUE(p->pause());
  // No thread it stopped is still running soon after (timed_calls.cpp waits for that).
  EXPECT_TRUE(p->wait_stopped(deadline_in(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const size_t before = size();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(size(), before) << "something wrote while paused";
  // The listing also caught short-lived members (a `sleep 0.01`) that may have exited before the
  // pause ('?'); every member still there is stopped, the two loops and the leader among them.
  // A member in uninterruptible sleep ('D', e.g. in the middle of an append to the file; seen once
  // in CI) stops as soon as that call returns: it is given a second to.
  std::vector<pid_t> stopped;
  for (pid_t pid : tree) {
    char st = state_of(pid);
    for (int i = 0; st == 'D' && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      st = state_of(pid);
    }
    // Still 'D' after that: a shell in vfork() waiting for a child that the pause stopped before
    // its exec (seen in CI for seconds); it cannot run until the child does. 'Z': a short-lived
    // member (a `sleep 0.01`) that exited around the pause, which its stopped parent cannot reap
    // (seen in CI); a zombie runs nothing. The file's size above is what shows that nothing ran.
    EXPECT_TRUE(st == 'T' || st == '?' || st == 'D' || st == 'Z') << "pid " << pid << " in state " << st;
    if (st == 'T') stopped.push_back(pid);
  }
  EXPECT_GE(stopped.size(), 2u);
  EXPECT_EQ(state_of(p->pid()), 'T');
  p->resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GT(size(), before) << "nothing ran after resume";
  for (pid_t pid : stopped) EXPECT_NE(state_of(pid), 'T') << "pid " << pid;
  p->kill_tree();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (pid_t pid : stopped) EXPECT_FALSE(alive(pid));
  EXPECT_FALSE(p->pause()) << "a process that is gone cannot be paused";
  std::remove(file.c_str());
}

// Timing pins a candidate's threads to one CPU (timed_calls.cpp, PinnedToCpu). With
// lock_cpu_affinity the process cannot move itself off it (sched_setaffinity fails); without,
// cpus_escape names a thread that did.
TEST(Process, PinnedThreadsStayUnderTheAffinityLockAndAMoveIsSeenWithout) {
  const std::vector<int> mine = allowed_cpus(::getpid());
  if (mine.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const std::vector<int> one{mine.back()};
  for (const bool lock : {true, false}) {
    SCOPED_TRACE(lock ? "locked" : "not locked");
    const std::string base = ::testing::TempDir() + "/kllm-pin-" + std::to_string(::getpid()) + (lock ? "-l" : "-u");
    std::remove((base + ".go").c_str());
    std::remove((base + ".rc").c_str());
    // A background child too: pinning covers the tree, and the move (taskset -a -p: every thread
    // of the shell) is the leader's.
    SpawnOptions o = sh("sleep 100 & while [ ! -e " + base + ".go ]; do sleep 0.01; done; taskset -a -p -c " + cpu_list(mine) +
                        " $$ >/dev/null 2>&1; echo $? > " + base + ".rc; sleep 100");
    o.lock_cpu_affinity = lock;
    auto p = Process::spawn(o);
    ASSERT_TRUE(p.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(p->pin_cpus(one).ok());
    EXPECT_EQ(p->cpus_escape(one), "");
    // The loop's `sleep 0.01` children come and go: one listed may be gone (no affinity to read)
    // by the time it is read (seen in CI); every one still there is pinned.
    for (pid_t d : list_descendants(p->pid())) {
      const std::vector<int> cpus = allowed_cpus(d);
      if (cpus.empty() && !alive(d)) continue;
      EXPECT_EQ(cpus, one) << "descendant " << d;
    }
    EXPECT_EQ(allowed_cpus(p->pid()), one);
    { std::ofstream(base + ".go") << "go"; }
    std::string rc;
    for (int i = 0; i < 500 && rc.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      auto t = read_text_file(base + ".rc");
      if (t.ok() && t->find('\n') != std::string::npos) rc = t->substr(0, t->find('\n'));
    }
    ASSERT_FALSE(rc.empty()) << "taskset never ran";
    if (lock) {
      EXPECT_NE(rc, "0") << "sched_setaffinity succeeded under the lock";
      EXPECT_EQ(p->cpus_escape(one), "");
      EXPECT_EQ(allowed_cpus(p->pid()), one);
    } else {
      EXPECT_EQ(rc, "0");
      const std::string moved = p->cpus_escape(one);
      EXPECT_NE(moved.find("may run on CPUs " + cpu_list(mine)), std::string::npos) << moved;
    }
    p->kill_tree();
    std::remove((base + ".go").c_str());
    std::remove((base + ".rc").c_str());
  }
}

TEST(Process, CpuListsAreRanges) {
  EXPECT_EQ(cpu_list({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpu_list({5}), "5");
  EXPECT_EQ(cpu_list({3, 1, 2, 7, 9, 10}), "1-3,7,9-10");
  EXPECT_EQ(cpu_list({}), "");
}

TEST(Process, ListingDescendantsSurvivesProcessesExitingMidScan) {
  // Processes that are reaped between the listing's open and read of /proc/<pid>/stat (ESRCH)
  // once escaped as an exception from the stream buffer and aborted `kernelllm verify`. A
  // thread forks and reaps short-lived children while the main thread lists, many times over.
  std::atomic<bool> stop{false};
  std::atomic<int> forks{0};
  const auto churn = [&] {
    while (!stop.load()) {
      pid_t c = ::fork();
      if (c == 0) ::_exit(0);
      if (c > 0) {
        ::waitpid(c, nullptr, 0);
        forks.fetch_add(1);
      }
    }
  };
  std::thread a(churn), b(churn);
  for (int i = 0; i < 2000 || forks.load() < 200; ++i) EXPECT_NO_THROW(list_descendants(::getpid()));
  stop.store(true);
  a.join();
  b.join();
  EXPECT_GE(forks.load(), 200);
}

TEST(Process, SubreaperCatchesOrphanedSetsidGrandchildren) {
  ASSERT_TRUE(become_subreaper());
  // The middle shell exits at once: the setsid sleeper is orphaned and adopted by us.
  auto p = Process::spawn(sh("setsid sleep 100 & echo $! >&2; exit 0"));
  ASSERT_TRUE(p.ok());
  auto e = p->wait(deadline_in(10));
  ASSERT_TRUE(e.has_value());
  pid_t orphan = static_cast<pid_t>(std::stol(p->stderr_tail()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(alive(orphan));
  EXPECT_GE(reap_orphans(), 1);
  EXPECT_FALSE(alive(orphan));
}

TEST(Process, OrphanReapingSparesTheLiveWorkersOfOtherVerifiers) {
  // Two verify() calls at once in one process (eval --problem-jobs, Python threads calling verify):
  // the one that ends first reaps orphans while the other's workers, direct children carrying
  // the worker marker too, still run.
  ASSERT_TRUE(become_subreaper());
  auto live = Process::spawn(sh("sleep 100"));
  ASSERT_TRUE(live.ok());
  auto p = Process::spawn(sh("setsid sleep 100 & echo $! >&2; exit 0"));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->wait(deadline_in(10)).has_value());
  pid_t orphan = static_cast<pid_t>(std::stol(p->stderr_tail()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(alive(orphan));
  EXPECT_EQ(reap_orphans(), 1);
  EXPECT_FALSE(alive(orphan));
  EXPECT_TRUE(alive(live->pid()));
  EXPECT_TRUE(live->running());
}

TEST(Process, DestructorKillsAndReaps) {
  pid_t pid = -1;
  {
    auto p = Process::spawn(sh("sleep 100"));
    ASSERT_TRUE(p.ok());
    pid = p->pid();
    EXPECT_TRUE(alive(pid));
  }
  EXPECT_FALSE(alive(pid));
}

TEST(Process, NonexistentProgramExits127) {
  SpawnOptions o;
  o.argv = {"/nonexistent/kernelllm-test"};
  auto p = Process::spawn(o);
  ASSERT_TRUE(p.ok());
  auto e = p->wait(deadline_in(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 127);
}

}  // namespace
}  // namespace kernelllm::harness
