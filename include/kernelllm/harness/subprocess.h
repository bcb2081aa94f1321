// Child processes for the verifier: spawn with two protocol pipes (fd 3 = requests to the
// child, fd 4 = replies from it; 4-byte little-endian length + JSON frames), optionally fd 5 = a
// SOCK_SEQPACKET socket that carries descriptors (SCM_RIGHTS) each way, stdout/stderr kept
// as bounded tails, own session/process group, deadline-based I/O, and a kill that takes the
// whole process tree (process group, /proc descendants, optional cgroup). RAII: the destructor
// kills and reaps. Not thread-safe per object; different objects may be used from different threads.
#pragma once

#include <atomic>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"

namespace kernelllm::harness {

inline constexpr size_t kMaxMessageBytes = size_t{1} << 20;  // protocol frame payload limit

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Keeps the last `capacity` bytes written and counts all of them.
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity) : capacity_(capacity) {}
  void append(std::string_view bytes);
  std::string str() const;  // the kept tail, oldest first
  size_t total_bytes() const { return total_; }
  bool truncated() const { return total_ > capacity_; }

 private:
  size_t capacity_;
  std::string buf_;  // size ≤ capacity_; when full, head_ marks the oldest byte
  size_t head_ = 0;
  size_t total_ = 0;
};

// Frame encoding/decoding. The decoder accepts bytes in any chunking.
std::string encode_frame(const Json& message);
class FrameDecoder {
 public:
  explicit FrameDecoder(size_t max_bytes = kMaxMessageBytes) : max_bytes_(max_bytes) {}
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // A complete message, nullopt when more bytes are needed, or an error (oversize, bad JSON).
  Result<std::optional<Json>> next();

 private:
  size_t max_bytes_;
  std::string buf_;
};

struct ExitInfo {
  bool exited = false;  // normal exit (code valid)
  int code = 0;
  int signal = 0;       // terminating signal when !exited
  std::string describe() const;  // "exit code 3", "killed by signal 11 (SIGSEGV)"
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH of the parent
  std::vector<std::string> env;   // "KEY=VALUE"; the child sees exactly these
  std::string cwd;                // empty: inherit
  bool protocol_fds = true;       // fd 3/4 pipes
  bool fd_channel = false;        // fd 5: a socket for passing descriptors (with protocol_fds)
  size_t tail_bytes = 64 * 1024;  // per stream
  std::optional<uint64_t> rlimit_as_bytes;
  std::optional<uint64_t> rlimit_nproc;
  std::vector<std::string> cgroup_procs_files;  // the child joins these before exec
  bool no_core_dumps = true;
  // A seccomp filter in the child (inherited by everything it execs): sched_setaffinity fails
  // with EPERM, so the process cannot move itself off the CPUs the parent pins it to. Where the
  // kernel refuses the filter the child runs without it (the sandbox probe says which).
  bool lock_cpu_affinity = false;
};

// The child's ends of a worker's pipes, for a worker that another process starts for us
// (Process::adopt): fd 3 (requests, read), fd 4 (replies, write), fd 5 (-1 without fd_channel),
// stdout and stderr.
struct ChildEnds {
  int request_read = -1, reply_write = -1, channel = -1, out_write = -1, err_write = -1;
};
struct ChildPipes;  // subprocess.cpp

// The seccomp program of SpawnOptions::lock_cpu_affinity as raw `struct sock_filter` entries
// (8 bytes each), for a process that installs it itself (the zygote's candidates); empty where
// no filter is built.
std::string affinity_lock_filter();

enum class ReceiveStatus { ok, timeout, closed, protocol_error };
struct Received {
  ReceiveStatus status = ReceiveStatus::closed;
  Json message;       // when ok
  std::string error;  // otherwise
};

class Process {
 public:
  Process() = default;
  ~Process();
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  static Result<Process> spawn(const SpawnOptions& options);
  // A worker another process forks for us (the zygote, harness/zygote.h): makes the pipes
  // `options` asks for (argv, env, cwd, limits and filters are the starter's business) and calls
  // `start` with the child's ends while no orphan can be reaped; `start` passes them on and returns
  // the worker's pid, which must by then be a child of this process (adopted, as subreaper).
  static Result<Process> adopt(const SpawnOptions& options, const std::function<Result<pid_t>(const ChildEnds&)>& start);

  pid_t pid() const { return pid_; }
  // Once *flag is true, send() and receive() give up at their next poll (within 200 ms) as if
  // their deadline had passed; the owner then kills the process as usual. nullptr: never.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }
  bool running() const { return pid_ > 0 && !exit_.has_value(); }

  // Writes one frame; fails when the child does not read it before the deadline or is gone.
  Status send(const Json& message, Deadline deadline);
  // Reads one frame, draining stdout/stderr meanwhile.
  Received receive(Deadline deadline);
  // Descriptors over the fd 5 channel (SpawnOptions::fd_channel). send_fd passes a duplicate of
  // `fd` (the caller keeps its own); receive_fd returns a new descriptor (close-on-exec) that the
  // caller owns, or an error when none arrives before the deadline or the message holds no
  // descriptor.
  Status send_fd(int fd, Deadline deadline);
  Result<int> receive_fd(Deadline deadline);
  // Drains stdout/stderr until stdout holds `marker`; false when the child exited or the deadline
  // passed first.
  bool await_stdout(std::string_view marker, Deadline deadline);
  // Drains stdout/stderr until the child exits or the deadline passes; returns the exit if seen.
  std::optional<ExitInfo> wait(Deadline deadline);
  // SIGKILLs the process group, every /proc descendant and every member of the cgroups, then reaps.
  void kill_tree();
  // Stops (SIGSTOP) the process, its group, its cgroups' members (else its /proc descendants),
  // scanning again until no new process shows (a fork between scan and signal); resume()
  // continues them (SIGCONT). A stopped process runs nothing, threads included; GPU work it
  // queued before still runs. False when the process is gone or may not be signalled.
  bool pause();
  void resume();
  // After pause(): true once no thread of what it stopped is running (state R in /proc), false at
  // the deadline. A SIGSTOP takes effect when a thread next returns to user space: one in a long
  // system call (a large write, an unmap) runs on until that call ends; one asleep uses no CPU.
  bool wait_stopped(Deadline deadline) const;
  // CPU affinity of every thread of the process and of its tree (cgroups' members, else /proc
  // descendants): pin_cpus sets it to `cpus`; cpus_escape names the first thread allowed to run
  // anywhere else ("" when none). Threads that exit meanwhile are skipped.
  Status pin_cpus(const std::vector<int>& cpus);
  std::string cpus_escape(const std::vector<int>& cpus) const;

  const std::optional<ExitInfo>& exit_info() const { return exit_; }
  std::string stdout_tail() const { return out_.str(); }
  std::string stderr_tail() const { return err_.str(); }

 private:
  void close_fds();
  void take_pipes(ChildPipes& pipes, const SpawnOptions& o);
  void drain(int timeout_ms);  // one poll round over stdout/stderr
  std::vector<pid_t> cgroup_members() const;  // every member of the cgroups (none without)
  std::vector<pid_t> tree_members() const;    // the cgroups' members, else the /proc descendants
  std::vector<pid_t> leader_and_tree() const;  // the process itself first, then tree_members()
  std::vector<pid_t> paused_;               // what pause() stopped, for resume()
  bool try_reap();

  pid_t pid_ = -1;
  int to_child_ = -1;    // write end of fd 3
  int from_child_ = -1;  // read end of fd 4
  int fd_sock_ = -1;     // our end of fd 5
  int out_fd_ = -1;
  int err_fd_ = -1;
  RingBuffer out_{64 * 1024};
  RingBuffer err_{64 * 1024};
  FrameDecoder decoder_;
  std::vector<std::string> cgroup_procs_files_;
  std::optional<ExitInfo> exit_;
  const std::atomic<bool>* cancel_ = nullptr;
};

// The CPUs thread `tid` may run on (0: the calling thread); empty when it cannot be read.
std::vector<int> allowed_cpus(pid_t tid = 0);
// Sets them (0: the calling thread).
Status set_allowed_cpus(pid_t tid, const std::vector<int>& cpus);
// "0-3,8" for {0,1,2,3,8}.
std::string cpu_list(const std::vector<int>& cpus);

// All live descendants of `root` (children, grandchildren, ...) from /proc, in discovery order.
std::vector<pid_t> list_descendants(pid_t root);
// Makes this process the subreaper of its descendants (PR_SET_CHILD_SUBREAPER) so that orphaned
// grandchildren (setsid + parent exit) stay visible as our descendants. Returns false if refused.
bool become_subreaper();
// Kills and reaps direct children of this process that were not spawned by a Process still
// unreaped and carry the worker marker KERNELLLM_WORKER=1 in their environment (orphans adopted
// as subreaper). Safe while other verifiers of this process run workers.
int reap_orphans();
// Reaps direct children of this process named `comm` (/proc/<pid>/comm) that no Process owns,
// once they have exited, waiting up to `wait_s` for those still running to exit. For what a
// sandbox leaves behind when it ends normally: bubblewrap's init of a pid namespace may outlive
// the bwrap that was our child by a moment and then, orphaned, become ours (we are the
// subreaper), a zombie nobody else reaps. Returns how many it reaped.
int reap_exited_children(std::string_view comm, double wait_s);

}  // namespace kernelllm::harness
