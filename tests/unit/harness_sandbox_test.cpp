// Sandbox: the probe reports what works; a sandboxed process sees no network, a read-only
// system, its own writable work dir, an allow-listed environment; limits are applied.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/sandbox.h"
#include "kernelllm/harness/subprocess.h"

namespace kernelllm::harness {
namespace {
namespace fs = std::filesystem;

SandboxSettings settings() {
  SandboxSettings s;
  s.python = find_executable("python3");
  s.max_tasks = 64;
  s.memory_bytes = uint64_t{1} << 30;
  // Keep the interpreter's own tree when it lives under a hidden home (pyenv under /root).
  std::error_code ec;
  fs::path exe = fs::canonical(s.python, ec);
  if (!ec) s.keep_paths.push_back(exe.parent_path().parent_path().string());
  return s;
}

TEST(Sandbox, DisabledSaysSoLoudly) {
  SandboxSettings s = settings();
  s.enabled = false;
  Sandbox box = Sandbox::create(s);
  EXPECT_FALSE(box.active());
  EXPECT_NE(box.summary().find("DISABLED"), std::string::npos);
}

// Per-candidate cgroups get a fresh name: one left behind by a killed run (its pid now ours) or
// taken under any of the v1 hierarchies is skipped, and what was made for it is given back.
TEST(Sandbox, FreshDirsSkipTakenNames) {
  const fs::path root = fs::temp_directory_path() / ("kllm-fresh-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::vector<std::string> parents = {(root / "memory").string(), (root / "pids").string()};
  for (const std::string& p : parents) fs::create_directories(p);
  fs::create_directory(root / "memory" / "stale-0");  // taken under the first parent
  fs::create_directory(root / "pids" / "stale-1");    // taken under the second only
  int n = 0;
  auto next = [&] { return "stale-" + std::to_string(n++); };
  auto made = make_fresh_dirs(parents, next);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(*made, (std::vector<std::string>{parents[0] + "/stale-2", parents[1] + "/stale-2"}));
  EXPECT_FALSE(fs::exists(root / "memory" / "stale-1")) << "made under the first parent, then given back";
  EXPECT_TRUE(fs::is_directory(root / "memory" / "stale-0"));  // others' directories are left alone

  // Every name taken: an error that says so, nothing made.
  auto same = [] { return std::string("stale-0"); };
  auto none = make_fresh_dirs(parents, same, 4);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no free directory name"), std::string::npos) << none.status().to_string();
  EXPECT_FALSE(fs::exists(root / "pids" / "stale-0"));

  // A parent that cannot hold it: mkdir's own reason, not a retry.
  auto bad = make_fresh_dirs({(root / "missing").string()}, next);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("No such file or directory"), std::string::npos) << bad.status().to_string();
  fs::remove_all(root);
}

TEST(Sandbox, MissingBwrapIsReportedInactive) {
  SandboxSettings s = settings();
  s.bwrap = "/nonexistent/bwrap";
  Sandbox box = Sandbox::create(s);
  EXPECT_FALSE(box.active());
  EXPECT_NE(box.summary().find("INACTIVE"), std::string::npos);
  EXPECT_NE(box.summary().find("not found"), std::string::npos);
}

// Interpreter paths under any tmpfs root come back (a venv under /tmp or /dev/shm, pyenv under
// /root); never one that is, contains or lies inside a directory bound on purpose (the run dir).
TEST(Sandbox, KeepPathsUnderTmpfsRootsAreBoundButNeverTheRunDir) {
  const fs::path root = fs::temp_directory_path() / ("kllm-keep-" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* d : {"venv/lib/site", "run/cand-0", "run/shared", "other"}) fs::create_directories(root / d);
  const std::string r = root.string();
  auto kept = keep_paths_to_bind({r + "/venv", r + "/venv/lib/site", r + "/run", r, r + "/run/cand-0/x", r + "/other/",
                                  r + "/missing", "/usr/lib", "/tmp"},
                                 {"/tmp", "/dev/shm", "/root", "/home"}, {r + "/run/cand-0", r + "/run/shared"});
  // venv (its site-packages comes with it), other; not the run dir, its ancestor `root`, a path
  // inside a bound dir, a missing path, /usr (visible anyway) or a tmpfs root itself.
  EXPECT_EQ(kept, (std::vector<std::string>{r + "/other", r + "/venv"}));
  fs::remove_all(root);
}

TEST(Sandbox, SymlinksOnTheInterpreterPathUnderTmpfsRoots) {
  const fs::path root = fs::temp_directory_path() / ("kllm-links-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "venv" / "bin");
  fs::create_symlink("/usr/bin/env", root / "venv" / "bin" / "python");  // like a venv's bin/python
  fs::create_directory_symlink(root / "venv", root / "link");              // a venv reached through a link
  auto links = symlinks_on_path((root / "link" / "bin" / "python").string(), {"/tmp", "/dev/shm"});
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0], std::make_pair((root / "link").string(), (root / "venv").string()));
  EXPECT_EQ(links[1], std::make_pair((root / "venv" / "bin" / "python").string(), std::string("/usr/bin/env")));
  fs::remove_all(root);
}

// Zombie children of this process whose comm is `comm`.
int zombie_children(const std::string& comm) {
  int n = 0;
  for (pid_t child : list_descendants(::getpid())) {
    auto stat = read_text_file("/proc/" + std::to_string(child) + "/stat", 4096);
    if (!stat.ok()) continue;
    const size_t lp = stat->find('(');
    const size_t rp = stat->rfind(')');
    if (lp == std::string::npos || rp == std::string::npos || stat->size() < rp + 3) continue;
    if (stat->substr(lp + 1, rp - lp - 1) == comm && (*stat)[rp + 2] == 'Z') ++n;
  }
  return n;
}

TEST(Sandbox, ProbeLeavesNoZombieOnceWeAreTheSubreaper) {
  // Every verify after the first in a process (eval, the Python binding) probes its sandbox as a
  // subreaper: bubblewrap's pid-namespace init, orphaned when bwrap exits first, became ours and
  // stayed a zombie, one per call.
  if (find_executable("bwrap").empty()) GTEST_SKIP() << "bubblewrap is not installed";
  ASSERT_TRUE(become_subreaper());
  for (int i = 0; i < 3; ++i) {
    Sandbox box = Sandbox::create(settings());
    ASSERT_TRUE(box.active()) << box.summary();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(zombie_children("bwrap"), 0);
}

class SandboxRun : public ::testing::Test {
 protected:
  void SetUp() override {
    box_ = Sandbox::create(settings());
    if (find_executable("bwrap").empty()) GTEST_SKIP() << "bubblewrap is not installed";
    ASSERT_TRUE(box_.active()) << box_.summary();
    dir_ = fs::temp_directory_path() / ("kllm-sbx-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs a shell script in the sandbox; returns (exit code, stdout).
  std::pair<int, std::string> run(const std::string& script) {
    auto prep = box_.prepare(dir_, {}, {"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin", "SECRET_OK=1"});
    EXPECT_TRUE(prep.ok()) << prep.status().to_string();
    prep->options.protocol_fds = false;
    auto p = Process::spawn(prep->options);
    EXPECT_TRUE(p.ok());
    auto e = p->wait(deadline_in(30));
    EXPECT_TRUE(e.has_value());
    return {e && e->exited ? e->code : -1, p->stdout_tail()};
  }

  Sandbox box_;
  fs::path dir_;
};

TEST_F(SandboxRun, ProbeSeesProtectionsActive) {
  EXPECT_TRUE(box_.probe().net_off);
  EXPECT_TRUE(box_.probe().fs_read_only);
  if (::geteuid() == 0) {
    EXPECT_EQ(box_.probe().uid, 65534);
  }
  EXPECT_NE(box_.summary().find("net=off fs=read-only"), std::string::npos) << box_.summary();
}

TEST_F(SandboxRun, SystemIsReadOnlyWorkDirWritable) {
  auto [code, out] = run("touch /usr/kllm-x 2>/dev/null && echo sys-writable; echo hi > ./f && cat ./f");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "hi\n");
  EXPECT_TRUE(fs::exists(dir_ / "f"));
}

TEST_F(SandboxRun, EnvironmentIsExactlyTheAllowList) {
  ::setenv("KLLM_LEAK_TEST", "1", 1);
  auto [code, out] = run("env | sort | grep -v '^PWD=\\|^SHLVL=\\|^_='");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "PATH=/usr/bin:/bin\nSECRET_OK=1\n");
}

TEST_F(SandboxRun, HomeDirectoriesAreHidden) {
  fs::path secret = "/root/.kllm-sandbox-secret";
  std::ofstream(secret) << "key";
  auto [code, out] = run("cat /root/.kllm-sandbox-secret 2>/dev/null || echo hidden");
  EXPECT_EQ(out, "hidden\n");
  fs::remove(secret);
  EXPECT_NE(box_.summary().find("homes=hidden"), std::string::npos) << box_.summary();
}

TEST_F(SandboxRun, RootOwnedFilesAreUnreadable) {
  if (::geteuid() != 0 || box_.probe().setpriv_path.empty()) GTEST_SKIP() << "needs root and setpriv: " << box_.summary();
  auto [code, out] = run("id -u; cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable || echo shadow-denied");
  EXPECT_EQ(out, "65534\nshadow-denied\n");
  EXPECT_NE(box_.summary().find("uid=65534 (setpriv"), std::string::npos) << box_.summary();
}

TEST_F(SandboxRun, HostTmpAndShmArePrivate) {
  std::ofstream(fs::path("/tmp") / "kllm-host-visible") << "x";
  auto [code, out] = run("ls /tmp /dev/shm | grep kllm-host-visible || echo hidden");
  EXPECT_EQ(out, "hidden\n");
  fs::remove(fs::path("/tmp") / "kllm-host-visible");
}

TEST_F(SandboxRun, ProcessCountIsLimitedWhenACgroupIsWritable) {
  if (!box_.probe().cgroup_pids) GTEST_SKIP() << "no writable pids cgroup: " << box_.summary();
  // 64 tasks at most: a flood of 200 sleepers hits the limit, and the shell dies on "Cannot fork".
  auto [code, out] = run("i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; echo started $i");
  EXPECT_EQ(out.find("started 200"), std::string::npos) << out;
  EXPECT_NE(code, 0);
}

}  // namespace
}  // namespace kernelllm::harness
