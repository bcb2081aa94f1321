// The zygote: a worker it forks greets and serves like an exec'd one, and a candidate it forks
// into a sandbox is confined as an exec'd one is, checked from outside (/proc of the host).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/workers.h"
#include "harness/zygote.h"

namespace kernelllm::harness {
namespace {
namespace fs = std::filesystem;

struct Fixture {
  PythonEnv py;
  fs::path package_dir;
  std::shared_ptr<Zygote> zygote;
  std::string skip;  // why the test cannot run here
};

Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    auto py = probe_python(choose_python(""), false);
    if (!py.ok()) {
      x.skip = "no interpreter with torch: " + py.status().to_string();
      return x;
    }
    x.py = *py;
    auto dir = find_package_dir("");
    if (!dir.ok()) {
      x.skip = dir.status().to_string();
      return x;
    }
    x.package_dir = *dir;
    if (!become_subreaper()) {
      x.skip = "PR_SET_CHILD_SUBREAPER refused";
      return x;
    }
    x.zygote = Zygote::shared(x.py.executable, x.package_dir, true);
    if (!x.zygote) {
      x.skip = "KERNELLLM_ZYGOTE=0";
      return x;
    }
    if (Status s = x.zygote->ready(300); !s.ok()) x.skip = "zygote did not start: " + s.to_string();
    return x;
  }();
  return f;
}

Sandbox make_sandbox(const PythonEnv& py) {
  SandboxSettings s;
  s.python = py.executable;
  s.keep_paths = py.paths;
  s.max_tasks = 256;
  s.memory_bytes = uint64_t{4} << 30;
  return Sandbox::create(s);
}

std::map<std::string, std::string> proc_status(pid_t pid) {
  std::map<std::string, std::string> out;
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(f, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    out[line.substr(0, colon)] = v;
  }
  return out;
}

std::string ns_of(const std::string& who, const char* name) {
  std::error_code ec;
  return fs::read_symlink(fmt::format("/proc/{}/ns/{}", who, name), ec).string();
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("kllm-zygote-{}-{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(Zygote, LaunchEnvironmentCarriesTheDeviceAndExtraEntries) {
  const fs::path dir = fresh_dir("env");
  // A size variant's judge gets one hardware queue (judge_setup.cpp); the main judge does not.
  const auto has = [](const std::vector<std::string>& env, const std::string& e) {
    return std::find(env.begin(), env.end(), e) != env.end();
  };
  const auto variant = worker_launch_env("judge", dir / "v", "cuda:0", 2, {"CUDA_DEVICE_MAX_CONNECTIONS=1"});
  EXPECT_TRUE(has(variant, "KERNELLLM_JUDGE_DEVICE=cuda:0"));
  EXPECT_TRUE(has(variant, "CUDA_DEVICE_MAX_CONNECTIONS=1"));
  const auto main_judge = worker_launch_env("judge", dir / "m", "cuda:0", 2);
  EXPECT_FALSE(std::any_of(main_judge.begin(), main_judge.end(),
                           [](const std::string& e) { return e.starts_with("CUDA_DEVICE_MAX_CONNECTIONS="); }));
  fs::remove_all(dir);
}

TEST(Zygote, ForkedJudgeGreetsServesAndExits) {
  Fixture& f = fixture();
  if (!f.skip.empty()) GTEST_SKIP() << f.skip;
  const fs::path dir = fresh_dir("judge");
  auto w = fork_worker(*f.zygote, "judge", f.package_dir, dir / "judge", {}, "cpu", nullptr, 1);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ((*w)->started_by, "zygote");
  ASSERT_TRUE(await_hello(**w, 60).ok()) << (*w)->proc.stderr_tail();
  EXPECT_EQ((*w)->hello.value("pid", 0), (*w)->proc.pid()) << "a judge is the leader itself";
  EXPECT_FALSE((*w)->hello.value("cuda_initialized", true));
  Reply r = (*w)->request(Json{{"op", "ping"}}, 30);
  EXPECT_TRUE(r.ok()) << r.error << r.message.dump();
  r = (*w)->request(Json{{"op", "exit"}}, 30);
  EXPECT_TRUE(r.ok()) << r.error;
  auto exit = (*w)->proc.wait(deadline_in(30));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->exited && exit->code == 0) << exit->describe();
  fs::remove_all(dir);
}

TEST(Zygote, ForkedCandidateIsConfinedAsAnExecdOne) {
  Fixture& f = fixture();
  if (!f.skip.empty()) GTEST_SKIP() << f.skip;
  Sandbox box = make_sandbox(f.py);
  if (!box.active()) GTEST_SKIP() << box.summary();
  // The zygote's own probe from inside: uid, capabilities, no_new_privs, seccomp, namespaces.
  EXPECT_EQ(f.zygote->candidate_refusal(box, f.package_dir), "");

  const fs::path dir = fresh_dir("cand");
  auto w = fork_worker(*f.zygote, "candidate", f.package_dir, dir / "cand-0", {}, "cpu", &box, 1);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  Worker& worker = **w;
  EXPECT_EQ(worker.started_by, "zygote");
  ASSERT_TRUE(await_hello(worker, 60).ok()) << worker.proc.stderr_tail();
  // And from outside: the interpreter is the leader's only child, inside the holder's namespaces.
  const std::vector<pid_t> below = list_descendants(worker.proc.pid());
  ASSERT_EQ(below.size(), 1u) << "leader " << worker.proc.pid();
  const pid_t inner = below[0];
  EXPECT_NE(worker.hello.value("pid", 0), inner) << "its own pid is that of its pid namespace";
  const auto st = proc_status(inner);
  if (box.probe().uid == 65534) {
    EXPECT_EQ(st.at("Uid"), "65534\t65534\t65534\t65534");
    EXPECT_EQ(st.at("Gid"), "65534\t65534\t65534\t65534");
  }
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) EXPECT_EQ(st.at(cap), "0000000000000000") << cap;
  EXPECT_EQ(st.at("NoNewPrivs"), "1");
  if (box.probe().cpus_locked) {
    EXPECT_EQ(st.at("Seccomp"), "2");
  }
  const std::string holder = std::to_string(list_descendants(worker.holder.pid()).back());
  for (const char* n : {"pid", "mnt", "net", "ipc", "uts"}) {
    EXPECT_EQ(ns_of(std::to_string(inner), n), ns_of(holder, n)) << n;
    EXPECT_NE(ns_of(std::to_string(inner), n), ns_of("self", n)) << n;
  }
  // Only its own descriptors: 0-5 (and whatever the interpreter opened since), none of the zygote's.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", inner), ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    EXPECT_EQ(target.find("kernelllm-verify-"), std::string::npos) << target;
  }
  if (worker.cgroup && !worker.cgroup->dirs.empty()) {
    std::ifstream procs(worker.cgroup->procs_files().front());
    std::vector<pid_t> members;
    for (long p; procs >> p;) members.push_back(static_cast<pid_t>(p));
    EXPECT_NE(std::find(members.begin(), members.end(), inner), members.end()) << "the interpreter is in its cgroup";
    EXPECT_NE(std::find(members.begin(), members.end(), worker.proc.pid()), members.end()) << "so is its leader";
    for (pid_t h : list_descendants(worker.holder.pid())) {
      EXPECT_NE(std::find(members.begin(), members.end(), h), members.end()) << "and the holder's process " << h;
    }
    EXPECT_EQ(static_cast<long>(members.size()), worker.base_processes);
    // Its tree is its cgroup, as for a worker started by exec: a pause (between timed round trips)
    // stops every member, the holder's too, which are not the leader's descendants.
    auto state = [](pid_t p) {
      std::ifstream in(fmt::format("/proc/{}/stat", p));
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t rp = stat.rfind(')');
      return rp != std::string::npos && stat.size() > rp + 2 ? stat[rp + 2] : '?';
    };
    ASSERT_TRUE(worker.proc.pause());
    ASSERT_TRUE(worker.proc.wait_stopped(deadline_in(10)));
    for (pid_t m : members) {  // (one asleep in an uninterruptible wait stops when it wakes)
      for (int i = 0; i < 500 && state(m) != 'T'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      EXPECT_EQ(state(m), 'T') << "member " << m;
    }
    worker.proc.resume();
    for (pid_t m : members) {
      for (int i = 0; i < 200 && state(m) == 'T'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      EXPECT_NE(state(m), 'T') << "member " << m;
    }
  }
  // A crash inside shows outside as the same signal.
  ::kill(inner, SIGSEGV);
  auto exit = worker.proc.wait(deadline_in(30));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGSEGV) << exit->describe();
  fs::remove_all(dir);
}

TEST(Zygote, OffWhenAskedAndWorkersStartByExec) {
  ::setenv("KERNELLLM_ZYGOTE", "0", 1);
  Fixture& f = fixture();
  EXPECT_EQ(Zygote::shared(f.py.executable, f.package_dir, true), nullptr);
  ::unsetenv("KERNELLLM_ZYGOTE");
}

}  // namespace
}  // namespace kernelllm::harness
