// Child processes with protocol pipes, bounded output tails, deadlines and whole-tree kill.
// The child is set up between fork and exec with async-signal-safe calls only.
#include "kernelllm/harness/subprocess.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "harness/process_tree.h"

namespace kernelllm::harness {

void RingBuffer::append(std::string_view bytes) {
  total_ += bytes.size();
  if (capacity_ == 0) return;
  if (bytes.size() >= capacity_) {
    buf_.assign(bytes.substr(bytes.size() - capacity_));
    head_ = 0;
    return;
  }
  for (char c : bytes) {
    if (buf_.size() < capacity_) {
      buf_.push_back(c);
    } else {
      buf_[head_] = c;
      head_ = (head_ + 1) % capacity_;
    }
  }
}

std::string RingBuffer::str() const {
  if (buf_.size() < capacity_) return buf_;
  return buf_.substr(head_) + buf_.substr(0, head_);
}

std::string encode_frame(const Json& message) {
  std::string body = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + body;
}

Result<std::optional<Json>> FrameDecoder::next() {
  if (buf_.size() < 4) return std::optional<Json>{};
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(buf_[static_cast<size_t>(i)])) << (8 * i);
  if (n > max_bytes_) {
    return error(ErrorCode::resource_exhausted,
                 fmt::format("protocol frame of {} bytes, expected at most {}", n, max_bytes_));
  }
  if (buf_.size() < 4 + size_t{n}) return std::optional<Json>{};
  std::string body = buf_.substr(4, n);
  buf_.erase(0, 4 + size_t{n});
  KLLM_ASSIGN_OR_RETURN(Json j, parse_json(body, "protocol frame"));
  if (!j.is_object()) {
    return error(ErrorCode::parse_error, fmt::format("protocol frame: expected a JSON object, found {}", json_type_name(j)));
  }
  return std::optional<Json>(std::move(j));
}

std::string ExitInfo::describe() const {
  if (exited && code > 128 && code < 128 + 65) {
    // Shells and bwrap report a child killed by signal N as exit status 128 + N.
    const char* inner = sigabbrev_np(code - 128);
    return fmt::format("exit code {} (a child killed by signal {} (SIG{}))", code, code - 128, inner ? inner : "?");
  }
  if (exited) return fmt::format("exit code {}", code);
  const char* name = sigabbrev_np(signal);
  return fmt::format("killed by signal {} (SIG{})", signal, name ? name : "?");
}

namespace {

int ms_until(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 1000));
}

// sched_setaffinity fails with EPERM; so does every system call of another ABI (a 32-bit entry,
// x32 numbers), so no other door to it stays open. Everything else is allowed.
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
constexpr uint32_t kFilterArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kForeignNr = 0x40000000u;  // __X32_SYSCALL_BIT: numbers at or above it
#else
constexpr uint32_t kFilterArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kForeignNr = 0xffffffffu;  // (no second ABI on this arch's numbers)
#endif
const sock_filter kAffinityFilter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kFilterArch, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kForeignNr, 1, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sched_setaffinity, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};
#endif

}  // namespace

std::string affinity_lock_filter() {
#if defined(__x86_64__) || defined(__aarch64__)
  return std::string(reinterpret_cast<const char*>(kAffinityFilter), sizeof kAffinityFilter);
#else
  return "";
#endif
}

namespace {

void install_affinity_lock() {
#if defined(__x86_64__) || defined(__aarch64__)
  sock_fprog prog{static_cast<unsigned short>(sizeof kAffinityFilter / sizeof kAffinityFilter[0]),
                  const_cast<sock_filter*>(kAffinityFilter)};
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
#endif
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Child side after fork: never returns. Only async-signal-safe calls.
[[noreturn]] void exec_child(const SpawnOptions& o, char* const* argv, char* const* envp, int req_r, int rep_w,
                             int out_w, int err_w, int sock) {
  ::setsid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (const std::string& f : o.cgroup_procs_files) {
    int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (::write(fd, "0", 1) < 0) {}  // "0" = the writing process
      ::close(fd);
    }
  }
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  if (o.protocol_fds) {
    // Move the pipe ends out of the way first so dup2 onto 3/4 cannot clobber one of them.
    int a = ::fcntl(req_r, F_DUPFD, 10);
    int b = ::fcntl(rep_w, F_DUPFD, 10);
    int c = sock >= 0 ? ::fcntl(sock, F_DUPFD, 10) : -1;
    ::dup2(a, 3);
    ::dup2(b, 4);
    if (c >= 0) ::dup2(c, 5);
  }
  // Close everything else (fd ≥ 5 or 6, or ≥ 3 without protocol fds).
  const bool channel = o.protocol_fds && sock >= 0;
  int first = o.protocol_fds ? (channel ? 6 : 5) : 3;
  long max_fd = ::sysconf(_SC_OPEN_MAX);
  for (long fd = first; fd < std::min(max_fd, 65536L); ++fd) ::close(static_cast<int>(fd));
  if (o.no_core_dumps) {
    rlimit r{0, 0};
    ::setrlimit(RLIMIT_CORE, &r);
  }
  if (o.rlimit_as_bytes) {
    rlimit r{*o.rlimit_as_bytes, *o.rlimit_as_bytes};
    ::setrlimit(RLIMIT_AS, &r);
  }
  if (o.rlimit_nproc) {
    rlimit r{*o.rlimit_nproc, *o.rlimit_nproc};
    ::setrlimit(RLIMIT_NPROC, &r);
  }
  if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(126);
  if (o.lock_cpu_affinity) install_affinity_lock();
  ::execvpe(argv[0], argv, envp);
  const char msg[] = "kernelllm: exec failed\n";
  if (::write(2, msg, sizeof msg - 1) < 0) {}
  ::_exit(127);
}

}  // namespace

namespace {

// The children this process spawned and has not reaped: reap_orphans never takes them for
// orphans, whichever verifier in this process (eval --problem-jobs, Python threads calling
// verify) owns them. The lock spans fork and registration, so no scan sees a child not yet registered.
std::mutex& live_mu() {
  static std::mutex mu;
  return mu;
}

std::set<pid_t>& live_pids() {
  static std::set<pid_t> pids;
  return pids;
}

void forget_pid(pid_t pid) {
  std::lock_guard<std::mutex> lock(live_mu());
  live_pids().erase(pid);
}

}  // namespace

// The pipes of a child: [0] our end / [1] the child's for each stream (for the request pipe the
// child reads [0] and we write [1]). Closed on destruction unless taken.
struct ChildPipes {
  int req[2] = {-1, -1}, rep[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, sock[2] = {-1, -1};
  ~ChildPipes() {
    for (int* p : {req, rep, out, err, sock}) {
      close_fd(p[0]);
      close_fd(p[1]);
    }
  }
  Status make(const SpawnOptions& o) {
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        (o.protocol_fds && (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0)) ||
        (o.protocol_fds && o.fd_channel && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) != 0)) {
      return error(ErrorCode::io_error, fmt::format("spawn {}: pipe: {}", o.argv.empty() ? "" : o.argv[0], std::strerror(errno)));
    }
    return {};
  }
  void close_child_ends() {
    close_fd(req[0]);
    close_fd(rep[1]);
    close_fd(out[1]);
    close_fd(err[1]);
    close_fd(sock[1]);
  }
};

void Process::take_pipes(ChildPipes& pipes, const SpawnOptions& o) {
  out_ = RingBuffer(o.tail_bytes);
  err_ = RingBuffer(o.tail_bytes);
  cgroup_procs_files_ = o.cgroup_procs_files;
  pipes.close_child_ends();
  fd_sock_ = std::exchange(pipes.sock[0], -1);
  to_child_ = std::exchange(pipes.req[1], -1);
  from_child_ = std::exchange(pipes.rep[0], -1);
  out_fd_ = std::exchange(pipes.out[0], -1);
  err_fd_ = std::exchange(pipes.err[0], -1);
  for (int fd : {to_child_, from_child_, out_fd_, err_fd_}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
}

Result<Process> Process::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return error(ErrorCode::invalid_argument, "spawn: expected a non-empty argv");
  ChildPipes pipes;
  KLLM_RETURN_IF_ERROR(pipes.make(o));
  std::vector<char*> argv, envp;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : o.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid;
  {
    std::lock_guard<std::mutex> lock(live_mu());
    pid = ::fork();  // the child only execs (exec_child): it never touches the lock
    if (pid > 0) live_pids().insert(pid);
  }
  if (pid < 0) return error(ErrorCode::resource_exhausted, fmt::format("spawn {}: fork: {}", o.argv[0], std::strerror(errno)));
  if (pid == 0) exec_child(o, argv.data(), envp.data(), pipes.req[0], pipes.rep[1], pipes.out[1], pipes.err[1], pipes.sock[1]);

  Process p;
  p.pid_ = pid;
  p.take_pipes(pipes, o);
  return p;
}

Result<Process> Process::adopt(const SpawnOptions& o, const std::function<Result<pid_t>(const ChildEnds&)>& start) {
  ChildPipes pipes;
  KLLM_RETURN_IF_ERROR(pipes.make(o));
  const ChildEnds ends{pipes.req[0], pipes.rep[1], pipes.sock[1], pipes.out[1], pipes.err[1]};
  pid_t pid = -1;
  {
    // Held from the request to the registration: the worker is our child (adopted) before `start`
    // returns, and reap_orphans must not take it for an orphan meanwhile.
    std::lock_guard<std::mutex> lock(live_mu());
    Result<pid_t> got = start(ends);
    if (!got.ok()) return got.status();
    pid = *got;
    if (pid <= 0 || parent_pid_of(pid) != ::getpid()) {
      if (pid > 0) ::kill(pid, SIGKILL);
      return error(ErrorCode::internal, fmt::format("adopt: process {} is not a child of this process (is it a subreaper?)", pid));
    }
    live_pids().insert(pid);
  }
  Process p;
  p.pid_ = pid;
  p.take_pipes(pipes, o);
  return p;
}

Process::~Process() {
  if (pid_ > 0) kill_tree();
  close_fds();
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this == &other) return *this;
  if (pid_ > 0) kill_tree();
  close_fds();
  pid_ = std::exchange(other.pid_, -1);
  to_child_ = std::exchange(other.to_child_, -1);
  from_child_ = std::exchange(other.from_child_, -1);
  fd_sock_ = std::exchange(other.fd_sock_, -1);
  out_fd_ = std::exchange(other.out_fd_, -1);
  err_fd_ = std::exchange(other.err_fd_, -1);
  out_ = std::move(other.out_);
  err_ = std::move(other.err_);
  decoder_ = std::move(other.decoder_);
  cgroup_procs_files_ = std::move(other.cgroup_procs_files_);
  paused_ = std::move(other.paused_);
  exit_ = std::move(other.exit_);
  cancel_ = std::exchange(other.cancel_, nullptr);
  return *this;
}

void Process::close_fds() {
  close_fd(to_child_);
  close_fd(from_child_);
  close_fd(fd_sock_);
  close_fd(out_fd_);
  close_fd(err_fd_);
}

bool Process::try_reap() {
  if (pid_ <= 0 || exit_) return exit_.has_value();
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r != pid_) return false;
  forget_pid(pid_);
  ExitInfo e;
  if (WIFEXITED(st)) { e.exited = true; e.code = WEXITSTATUS(st); }
  else if (WIFSIGNALED(st)) { e.signal = WTERMSIG(st); }
  exit_ = e;
  return true;
}

void Process::drain(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
    return;
  }
  if (::poll(fds, static_cast<nfds_t>(n), timeout_ms) <= 0) return;
  char buf[16384];
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
    RingBuffer& ring = fds[i].fd == out_fd_ ? out_ : err_;
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r > 0) ring.append(std::string_view(buf, static_cast<size_t>(r)));
    else if (r == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(fd);
  }
}

Status Process::send_fd(int fd, Deadline deadline) {
  if (fd_sock_ < 0) return error(ErrorCode::internal, "send_fd: the process has no descriptor channel");
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    // MSG_NOSIGNAL: a child that closed its end gets an error here, not a SIGPIPE for us.
    if (::sendmsg(fd_sock_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) return Status{};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return error(ErrorCode::io_error, fmt::format("send_fd: {}", std::strerror(errno)));
    }
    if (Clock::now() >= deadline || (cancel_ && cancel_->load())) {
      return error(ErrorCode::resource_exhausted, "send_fd: the child did not take the descriptor in time");
    }
    pollfd p{fd_sock_, POLLOUT, 0};
    ::poll(&p, 1, std::min(ms_until(deadline), 200));
  }
}

Result<int> Process::receive_fd(Deadline deadline) {
  if (fd_sock_ < 0) return error(ErrorCode::internal, "receive_fd: the process has no descriptor channel");
  for (;;) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = ::recvmsg(fd_sock_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r > 0) {
      std::vector<int> fds;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
          int got = -1;
          std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(got);
        }
      }
      if (fds.size() == 1 && !(msg.msg_flags & MSG_CTRUNC)) return fds[0];
      for (int f : fds) ::close(f);
      return error(ErrorCode::parse_error, fmt::format("receive_fd: expected one descriptor, found {}", fds.size()));
    }
    if (r == 0) return error(ErrorCode::io_error, "receive_fd: the child closed its descriptor channel");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return error(ErrorCode::io_error, fmt::format("receive_fd: {}", std::strerror(errno)));
    }
    if (Clock::now() >= deadline || (cancel_ && cancel_->load())) {
      return error(ErrorCode::resource_exhausted, "receive_fd: no descriptor arrived in time");
    }
    pollfd p{fd_sock_, POLLIN, 0};
    ::poll(&p, 1, std::min(ms_until(deadline), 200));
  }
}

namespace {

// A write to a pipe whose reader is gone raises SIGPIPE in the writing thread, and its default
// action ends this process: a candidate that exits right after a reply would take the verifier
// (and every other candidate's result) with it. SIGPIPE is blocked in this thread for the write,
// so the write fails with EPIPE, and one it raised is taken off the thread's pending set before
// the mask is restored (one that was pending before is left alone).
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeBlocked() {
    if (!blocked_) return;
    if (!was_pending_) {
      const timespec now{0, 0};
      while (::sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false, blocked_ = false;
};

}  // namespace

Status Process::send(const Json& message, Deadline deadline) {
  std::string frame = encode_frame(message);
  if (frame.size() - 4 > kMaxMessageBytes) {
    return error(ErrorCode::invalid_argument, fmt::format("request of {} bytes exceeds {}", frame.size() - 4, kMaxMessageBytes));
  }
  if (to_child_ < 0) return error(ErrorCode::io_error, "request pipe is closed");
  const SigpipeBlocked no_sigpipe;
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t w = ::write(to_child_, frame.data() + off, frame.size() - off);
    if (w > 0) { off += static_cast<size_t>(w); continue; }
    if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return error(ErrorCode::io_error, fmt::format("writing request: {}", std::strerror(errno)));
    }
    if (Clock::now() >= deadline) return error(ErrorCode::resource_exhausted, "child did not read its request before the deadline");
    if (cancel_ && cancel_->load()) return error(ErrorCode::resource_exhausted, "cancelled");
    pollfd p{to_child_, POLLOUT, 0};
    ::poll(&p, 1, std::min(ms_until(deadline), 50));
    drain(0);
  }
  return {};
}

Received Process::receive(Deadline deadline) {
  Received out;
  char buf[65536];
  for (;;) {
    auto msg = decoder_.next();
    if (!msg.ok()) {
      out.status = ReceiveStatus::protocol_error;
      out.error = msg.status().message();
      return out;
    }
    if (msg->has_value()) {
      out.status = ReceiveStatus::ok;
      out.message = std::move(**msg);
      return out;
    }
    if (from_child_ < 0) {
      out.status = ReceiveStatus::closed;
      out.error = "reply pipe closed";
      return out;
    }
    if (cancel_ && cancel_->load()) {
      out.status = ReceiveStatus::timeout;
      out.error = "cancelled";
      return out;
    }
    int left = ms_until(deadline);
    pollfd fds[3] = {{from_child_, POLLIN, 0}, {out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    int n = ::poll(fds, 3, std::min(left, 200));
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = ::read(from_child_, buf, sizeof buf);
      if (r > 0) decoder_.feed(std::string_view(buf, static_cast<size_t>(r)));
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(from_child_);
    }
    if (n > 0 && ((fds[1].revents | fds[2].revents) & (POLLIN | POLLHUP | POLLERR))) drain(0);
    if (left == 0) {
      out.status = ReceiveStatus::timeout;
      out.error = "no reply before the deadline";
      return out;
    }
  }
}

bool Process::await_stdout(std::string_view marker, Deadline deadline) {
  for (;;) {
    if (out_.str().find(marker) != std::string::npos) return true;
    if (Clock::now() >= deadline || (out_fd_ < 0 && err_fd_ < 0) || try_reap()) {
      drain(0);
      return out_.str().find(marker) != std::string::npos;
    }
    drain(std::min(ms_until(deadline), 50));
  }
}

std::optional<ExitInfo> Process::wait(Deadline deadline) {
  for (;;) {
    if (try_reap()) {
      drain(0);
      drain(0);
      return exit_;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    drain(std::min(ms_until(deadline), 20));
  }
}

void Process::kill_tree() {
  if (pid_ <= 0) return;
  // Repeat: a process may fork between the scan and the kill. The leader stays a zombie (not
  // reaped) until the end, so its pid and process group cannot be reused meanwhile.
  std::set<pid_t> killed;
  for (int round = 0; round < 20; ++round) {
    // After the leader was reaped its pid may be reused: then only the group and cgroups count.
    std::vector<pid_t> victims = exit_ ? std::vector<pid_t>{} : list_descendants(pid_);
    for (pid_t p : cgroup_members()) victims.push_back(p);
    ::kill(-pid_, SIGKILL);
    if (!exit_) ::kill(pid_, SIGKILL);
    for (pid_t v : victims) ::kill(v, SIGKILL);
    killed.insert(victims.begin(), victims.end());
    if (victims.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!exit_) {
    int st = 0;
    if (::waitpid(pid_, &st, 0) == pid_) {
      forget_pid(pid_);
      ExitInfo e;
      if (WIFEXITED(st)) { e.exited = true; e.code = WEXITSTATUS(st); }
      else if (WIFSIGNALED(st)) { e.signal = WTERMSIG(st); }
      exit_ = e;
    }
  }
  // What of the tree became our child when its parent died (we are the subreaper): a worker the
  // zygote forked once its leader is gone, a sandbox's init once bwrap is. Reaped here, within
  // ~2 s: a zombie keeps its pid, and a pid namespace's init waits in its exit for every member.
  // Never a pid another Process owns now (a reused pid: live_pids, under its lock).
  for (int i = 0; i < 200 && !killed.empty(); ++i) {
    {
      std::lock_guard<std::mutex> lock(live_mu());
      for (auto it = killed.begin(); it != killed.end();) {
        // Gone, or someone else's to reap (a Process of its own): done. Another's child: it may
        // become ours when that parent (killed too) exits.
        const std::optional<pid_t> parent = parent_pid_of(*it);
        if (!parent || live_pids().count(*it) || (*parent == ::getpid() && ::waitpid(*it, nullptr, WNOHANG) == *it)) {
          it = killed.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!killed.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  drain(0);
  close_fds();
  pid_ = -1;
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

namespace {

// This process's direct children that no Process owns: orphans adopted as subreaper. Called with
// live_mu() held.
std::vector<pid_t> unowned_children() {
  std::vector<pid_t> out;
  for (pid_t child : list_descendants(::getpid())) {
    if (!live_pids().count(child) && parent_pid_of(child) == ::getpid()) out.push_back(child);
  }
  return out;
}

}  // namespace

int reap_orphans() {
  int n = 0;
  std::lock_guard<std::mutex> lock(live_mu());
  for (pid_t child : unowned_children()) {
    auto env = read_text_file(fmt::format("/proc/{}/environ", child), size_t{1} << 20);
    if (!env.ok() || env->find("KERNELLLM_WORKER=1") == std::string::npos) continue;
    ::kill(-child, SIGKILL);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    ++n;
  }
  return n;
}

int reap_exited_children(std::string_view comm, double wait_s) {
  int n = 0;
  const Deadline until = deadline_in(wait_s);
  for (;;) {
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(live_mu());
      for (pid_t child : unowned_children()) {
        auto name = read_text_file(fmt::format("/proc/{}/comm", child), 256);
        if (!name.ok() || std::string_view(*name).substr(0, name->find('\n')) != comm) continue;
        if (::waitpid(child, nullptr, WNOHANG) == child) {
          ++n;
        } else {
          running = true;
        }
      }
    }
    if (!running || Clock::now() >= until) return n;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace kernelllm::harness
