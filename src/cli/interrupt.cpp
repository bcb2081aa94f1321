// SIGINT/SIGTERM clean-up for verify and eval (see interrupt.h). The handler only writes the
// signal number to a pipe (async-signal-safe); the work happens on the watcher thread.
#include "cli/interrupt.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/harness/verify.h"

namespace kernelllm::cli {
namespace {

namespace fs = std::filesystem;

int g_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  if (::write(g_pipe[1], &b, 1) < 0) {}  // nothing more can be done inside a handler
}

// Worker processes are this process's children, each the leader of its own session (setsid),
// so a kill of the child's process group takes its whole tree. They would also die with us
// (PR_SET_PDEATHSIG), but only after the run directories are gone; killing first means no
// worker writes into a directory being removed.
int kill_children() {
  const pid_t self = ::getpid();
  int killed = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = ::readdir(proc)) {
    const long pid = std::strtol(e->d_name, nullptr, 10);
    if (pid <= 0) continue;
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != self) continue;
    ::kill(-static_cast<pid_t>(pid), SIGKILL);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    ++killed;
  }
  ::closedir(proc);
  return killed;
}

int remove_run_dirs() {
  const std::string prefix = fmt::format("kernelllm-verify-{}-", ::getpid());
  int removed = 0;
  std::error_code ec;
  for (const fs::path& base : {fs::path("/dev/shm"), fs::temp_directory_path(ec)}) {
    for (const fs::directory_entry& e : fs::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      // The zygote's own directory (kernelllm-verify-PID-zygote-*) goes too, but is no run's.
      if (!rm && name.compare(prefix.size(), 7, "zygote-") != 0) ++removed;
    }
  }
  return removed;
}

}  // namespace

std::string quoted_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string out, arg;
  while (std::getline(in, arg, '\0')) {
    const bool plain = !arg.empty() && arg.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == std::string::npos;
    if (!out.empty()) out.push_back(' ');
    if (plain) {
      out.append(arg);
      continue;
    }
    out.push_back('\'');
    for (char c : arg) {
      if (c == '\'') out.append("'\\''");
      else out.push_back(c);
    }
    out.push_back('\'');
  }
  return out;
}

void install_interrupt_cleanup(const std::string& command, const std::string& kept) {
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;  // without the pipe the default action (exit) stays
  std::thread([command, kept] {
    unsigned char sig = 0;
    while (::read(g_pipe[0], &sig, 1) != 1) {}
    std::fprintf(stderr, "\n%s: %s: stopping the workers and removing this run's temporary files\n", command.c_str(),
                 sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
    // No verifier makes a run directory from now on (one being made is removed by its maker), so
    // none is left behind by a thread that was still starting one.
    harness::stop_making_run_dirs();
    const int killed = kill_children();
    const int removed = remove_run_dirs();
    std::fprintf(stderr, "%s: stopped %d worker process(es), removed %d temporary run director%s (kernelllm-verify-%d-*)\n",
                 command.c_str(), killed, removed, removed == 1 ? "y" : "ies", static_cast<int>(::getpid()));
    std::fprintf(stderr, "%s: %s\n", command.c_str(), kept.empty() ? "nothing was kept" : kept.c_str());
    std::fflush(stderr);
    ::_exit(128 + sig);
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace kernelllm::cli
