// A child's process tree seen from /proc and its cgroups: members, threads, stopping and
// continuing them, and their CPU affinity (timing pins a candidate's whole tree to one CPU).
#include "harness/process_tree.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/subprocess.h"

namespace kernelllm::harness {

std::optional<pid_t> parent_pid_of(pid_t pid) {
  auto stat = read_text_file(fmt::format("/proc/{}/stat", pid), size_t{1} << 16);
  if (!stat.ok()) return std::nullopt;
  size_t rp = stat->rfind(')');
  if (rp == std::string::npos) return std::nullopt;
  std::istringstream rest(stat->substr(rp + 1));
  char state = 0;
  long ppid = 0;
  if (!(rest >> state >> ppid)) return std::nullopt;
  return static_cast<pid_t>(ppid);
}

std::vector<pid_t> list_descendants(pid_t root) {
  // The parent of every process.
  std::vector<std::pair<pid_t, pid_t>> parent_of;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (!end || *end != '\0' || pid <= 0) continue;
      // A process may exit between readdir and the read (ESRCH): it is then simply not listed.
      if (auto ppid = parent_pid_of(static_cast<pid_t>(pid))) parent_of.emplace_back(static_cast<pid_t>(pid), *ppid);
    }
    ::closedir(d);
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i) {
    for (auto [pid, ppid] : parent_of) {
      if (ppid == out[i] && std::find(out.begin(), out.end(), pid) == out.end()) out.push_back(pid);
    }
  }
  out.erase(out.begin());
  return out;
}

std::vector<pid_t> Process::cgroup_members() const {
  std::vector<pid_t> out;
  for (const std::string& procs : cgroup_procs_files_) {
    std::ifstream f(procs);  // operator>> turns a failed read into a stopped loop, never a throw
    for (long p; f >> p;) out.push_back(static_cast<pid_t>(p));
  }
  return out;
}

std::vector<pid_t> Process::tree_members() const {
  // Without cgroups, the /proc scan (slower: every process of the machine is read).
  return cgroup_procs_files_.empty() ? list_descendants(pid_) : cgroup_members();
}

namespace {

// Every thread of `pids` (from /proc/<pid>/task).
std::vector<pid_t> threads_of(const std::vector<pid_t>& pids) {
  std::vector<pid_t> out;
  for (pid_t p : pids) {
    DIR* d = ::opendir(fmt::format("/proc/{}/task", p).c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long tid = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && tid > 0) out.push_back(static_cast<pid_t>(tid));
    }
    ::closedir(d);
  }
  return out;
}

}  // namespace

bool Process::pause() {
  if (!running() || ::kill(pid_, SIGSTOP) != 0) return false;
  ::kill(-pid_, SIGSTOP);
  paused_.assign(1, pid_);
  for (int round = 0; round < 10; ++round) {
    size_t fresh = 0;
    for (pid_t p : tree_members()) {
      if (std::find(paused_.begin(), paused_.end(), p) != paused_.end()) continue;
      ::kill(p, SIGSTOP);
      paused_.push_back(p);
      ++fresh;
    }
    if (fresh == 0) break;
  }
  return true;
}

bool Process::wait_stopped(Deadline deadline) const {
  for (;;) {
    bool all = true;
    for (pid_t t : threads_of(paused_)) {
      auto stat = read_text_file(fmt::format("/proc/{}/task/{}/stat", t, t), 4096);
      if (!stat.ok()) continue;  // gone
      const size_t rp = stat->rfind(')');
      const char state = rp != std::string::npos && stat->size() > rp + 2 ? (*stat)[rp + 2] : 'X';
      // Only a running (or runnable) thread uses the CPU: one asleep in a system call, 'S' or 'D'
      // (waiting for I/O, seen for seconds in CI), takes its stop when it wakes.
      if (state == 'R') {
        all = false;
        break;
      }
    }
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    // Yield: a runnable thread on our CPU (timing pins both) takes its stop when it next runs.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void Process::resume() {
  if (paused_.empty() || pid_ <= 0) return;
  ::kill(-pid_, SIGCONT);
  for (pid_t p : paused_) ::kill(p, SIGCONT);
  paused_.clear();
}


std::vector<int> allowed_cpus(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(tid, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

namespace {

int set_affinity_errno(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return ::sched_setaffinity(tid, sizeof set, &set) == 0 ? 0 : errno;
}

Status affinity_error(pid_t tid, const std::vector<int>& cpus, int err) {
  return error(ErrorCode::io_error, fmt::format("sched_setaffinity({}, CPUs {}): {}", tid, cpu_list(cpus), std::strerror(err)));
}

}  // namespace

Status set_allowed_cpus(pid_t tid, const std::vector<int>& cpus) {
  const int err = set_affinity_errno(tid, cpus);
  return err == 0 ? Status() : affinity_error(tid, cpus, err);
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::vector<int> c = cpus;
  std::sort(c.begin(), c.end());
  std::string out;
  for (size_t i = 0; i < c.size();) {
    size_t j = i;
    while (j + 1 < c.size() && c[j + 1] == c[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(c[i]) : fmt::format("{}-{}", c[i], c[j]);
    i = j + 1;
  }
  return out;
}

std::vector<pid_t> Process::leader_and_tree() const {
  std::vector<pid_t> procs = tree_members();
  procs.insert(procs.begin(), pid_);
  return procs;
}

Status Process::pin_cpus(const std::vector<int>& cpus) {
  if (!running()) return error(ErrorCode::not_found, "pin: the process is gone");
  std::vector<int> want = cpus;
  std::sort(want.begin(), want.end());
  // Again until no thread is new, the tree listed anew each time: a thread or process started
  // during a scan by one not yet pinned inherits the mask it had.
  std::vector<pid_t> done;
  for (int round = 0; round < 20; ++round) {
    size_t changed = 0;
    for (pid_t t : threads_of(leader_and_tree())) {
      if (std::find(done.begin(), done.end(), t) != done.end()) continue;
      done.push_back(t);
      const std::vector<int> now = allowed_cpus(t);
      if (now.empty() || now == want) continue;  // exited, or born pinned (a child of a pinned thread)
      ++changed;
      if (const int err = set_affinity_errno(t, want); err != 0 && err != ESRCH) return affinity_error(t, want, err);
    }
    if (changed == 0) return Status();
  }
  return Status();
}

std::string Process::cpus_escape(const std::vector<int>& cpus) const {
  if (!running()) return "";
  for (pid_t t : threads_of(leader_and_tree())) {
    const std::vector<int> got = allowed_cpus(t);
    if (got.empty()) continue;  // exited
    for (int c : got) {
      if (std::find(cpus.begin(), cpus.end(), c) == cpus.end()) {
        return fmt::format("thread {} may run on CPUs {}, not only {}", t, cpu_list(got), cpu_list(cpus));
      }
    }
  }
  return "";
}

}  // namespace kernelllm::harness
