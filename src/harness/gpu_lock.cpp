// Per-GPU lock shared across processes (gpu_lock.h): the in-process shared_mutex, then flock.
#include "gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

std::string physical_gpu_id(std::string_view device_name) {
  if (!device_name.starts_with("cuda")) return {};
  std::string ordinal = "0";
  if (auto colon = device_name.find(':'); colon != std::string_view::npos) ordinal = std::string(device_name.substr(colon + 1));
  std::string id = ordinal;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::vector<std::string> entries(1);
    for (const char* c = visible; *c; ++c) {
      if (*c == ',') entries.emplace_back();
      else if (*c != ' ') entries.back().push_back(*c);
    }
    char* end = nullptr;
    const long n = std::strtol(ordinal.c_str(), &end, 10);
    if (end && *end == '\0' && n >= 0 && static_cast<size_t>(n) < entries.size()) id = entries[static_cast<size_t>(n)];
  }
  return id;
}

fs::path gpu_lock_file(std::string_view device_name) {
  std::string id = physical_gpu_id(device_name);
  if (id.empty()) return {};
  for (char& c : id) {
    if (c == '/' || c == '.') c = '_';
  }
  return fs::path("/tmp/kernelllm-gpu-locks") / ("gpu-" + id + ".lock");
}

namespace {

int open_lock_file(const fs::path& file) {
  if (file.empty()) return -1;
  const fs::path dir = file.parent_path();
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // every user's processes share it
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) ::fchmod(fd, 0666);
  return fd;
}

// An engine writing on the GPU (GpuShare) holds this one shared; timing takes it exclusively.
fs::path engine_lock_file(const fs::path& file) {
  fs::path engine = file;
  engine += ".engine";
  return engine;
}

fs::path yield_lock_file(const fs::path& file) {
  fs::path y = file;
  y += ".yield";
  return y;
}

// An OFD read lock (fcntl F_OFD_*) on the whole file, without waiting: false when someone holds a
// write lock on it (no kernelllm process takes one). Unlike flock, a lock that would conflict can
// be looked at without taking it (F_OFD_GETLK, yield_wanted).
bool ofd_read_lock(int fd) {
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

}  // namespace

// Where a lock's time goes in this process (gpu_lock_times): its holders and waiting timers, and
// the time spent in each state since the first change.
class LockClock {
 public:
  enum What { kExclusive, kDraining, kShared, kFree, kStates };
  void change(int shared, int exclusive, int waiting) {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (started_) ms_[state()] += std::chrono::duration<double, std::milli>(now - since_).count();
    if (waiting > 0 && waiting_ == 0 && exclusive_ == 0 && shared_ > 0) ++drains_;
    if (waiting > 0 && waiting_ == 0) wait_since_ = now;
    started_ = true;
    since_ = now;
    shared_ += shared;
    exclusive_ += exclusive;
    waiting_ += waiting;
  }
  // How long a shared hold taken at `taken` has gone on while a timer waited (0: none waits now).
  double timer_waited_ms(std::chrono::steady_clock::time_point taken) {
    std::lock_guard lock(mu_);
    if (waiting_ == 0) return 0;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - std::max(wait_since_, taken)).count();
  }
  Json to_json() {
    std::lock_guard lock(mu_);
    const double span = ms_[kExclusive] + ms_[kDraining] + ms_[kShared] + ms_[kFree];
    return Json{{"span_ms", span},          {"exclusive_ms", ms_[kExclusive]}, {"draining_ms", ms_[kDraining]},
                {"shared_ms", ms_[kShared]}, {"free_ms", ms_[kFree]},          {"drains", drains_}};
  }

 private:
  What state() const {
    if (exclusive_ > 0) return kExclusive;
    if (waiting_ > 0) return kDraining;
    return shared_ > 0 ? kShared : kFree;
  }
  std::mutex mu_;
  bool started_ = false;
  std::chrono::steady_clock::time_point since_, wait_since_;
  int shared_ = 0, exclusive_ = 0, waiting_ = 0;
  long drains_ = 0;
  double ms_[kStates] = {};
};

namespace {

std::mutex clocks_mu;
std::map<std::string, LockClock>& lock_clocks() {
  static std::map<std::string, LockClock> clocks;
  return clocks;
}

LockClock* lock_clock(const fs::path& file) {
  if (file.empty()) return nullptr;
  std::lock_guard lock(clocks_mu);
  return &lock_clocks()[file.stem().string()];  // (map nodes stay where they are)
}

int flock_retrying(int fd, int op) {
  int rc;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

Json gpu_lock_times() {
  std::lock_guard lock(clocks_mu);
  Json j = Json::object();
  for (auto& [name, clock] : lock_clocks()) j[name] = clock.to_json();
  return j;
}

int GpuGuard::open_yield_file(const fs::path& file) { return file.empty() ? -1 : open_lock_file(yield_lock_file(file)); }

bool GpuGuard::yield_wanted(const GpuMutex& mu, int yield_fd) {
  if (mu.yield_asked.load() > 0) return true;
  if (yield_fd < 0) return false;
  struct flock fl {};
  fl.l_type = F_WRLCK;  // would a write lock conflict, i.e. does anyone hold a read lock?
  fl.l_whence = SEEK_SET;
  return ::fcntl(yield_fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

GpuGuard::GpuGuard(GpuMutex& mu, const fs::path& file, Mode mode, bool ask_yield)
    : mu_(mu), mode_(mode), clock_(lock_clock(file)) {
  if (mode_ == Mode::exclusive && !file.empty()) {
    // First: no engine writing on this GPU (GpuShare). Waited for before the turnstile, so that
    // correctness runs go on meanwhile; held to the end, so that none starts beside the timing.
    engine_fd_ = open_lock_file(engine_lock_file(file));
    if (engine_fd_ >= 0 && flock_retrying(engine_fd_, LOCK_EX) != 0) {
      ::close(engine_fd_);
      engine_fd_ = -1;
    }
  }
  // Clocked from here (gpu_lock_times): an engine's hold is not the GPU lock's.
  const bool exclusive = mode_ == Mode::exclusive;
  if (clock_ && exclusive) clock_->change(0, 0, 1);
  struct Taken {  // (however the constructor ends: the lock is held then)
    LockClock* lc;
    bool ex;
    std::chrono::steady_clock::time_point* at;
    ~Taken() {
      *at = std::chrono::steady_clock::now();
      if (lc) lc->change(ex ? 0 : 1, ex ? 1 : 0, ex ? -1 : 0);
    }
  } taken{clock_, exclusive, &taken_at_};
  // Asking holders to yield from here until the lock is held (the ask ends with this scope).
  struct Ask {
    GpuMutex* mu = nullptr;
    int fd = -1;
    ~Ask() {
      if (fd >= 0) ::close(fd);  // drops the OFD lock
      if (mu) --mu->yield_asked;
    }
  } ask;
  if (mode_ == Mode::exclusive && ask_yield) {
    ask.mu = &mu_;
    ++mu_.yield_asked;
    ask.fd = open_yield_file(file);
    if (ask.fd >= 0 && !ofd_read_lock(ask.fd)) {  // (then asked in this process only)
      ::close(ask.fd);
      ask.fd = -1;
    }
  }
  // Through the turnstile: a shared taker passes (it waits while an exclusive taker is in it), an
  // exclusive taker stays in it until it holds the lock.
  if (mode_ == Mode::shared) {
    { std::lock_guard pass(mu_.turnstile); }
    mu_.rw.lock_shared();
  } else {
    std::lock_guard stay(mu_.turnstile);
    mu_.rw.lock();
  }
  fd_ = open_lock_file(file);
  if (fd_ < 0) return;
  const int op = mode_ == Mode::shared ? LOCK_SH : LOCK_EX;
  fs::path intent = file;
  intent += ".intent";
  // (A turnstile that cannot be opened or taken leaves the lock alone, unordered.)
  const int turnstile = open_lock_file(intent);
  if (turnstile >= 0) (void)flock_retrying(turnstile, op);
  const int rc = flock_retrying(fd_, op);
  if (turnstile >= 0) ::close(turnstile);  // out of the turnstile
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

double GpuGuard::timer_waited_ms() const {
  return clock_ && mode_ == Mode::shared ? clock_->timer_waited_ms(taken_at_) : 0;
}

GpuGuard::~GpuGuard() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
  if (mode_ == Mode::shared) mu_.rw.unlock_shared();
  else mu_.rw.unlock();
  if (engine_fd_ >= 0) ::close(engine_fd_);
  if (clock_) clock_->change(mode_ == Mode::shared ? -1 : 0, mode_ == Mode::exclusive ? -1 : 0, 0);
}

ContextTurn::ContextTurn(const fs::path& file) {
  if (file.empty()) return;
  fs::path turn = file;
  turn += ".contexts";
  fd_ = open_lock_file(turn);
  if (fd_ >= 0 && flock_retrying(fd_, LOCK_EX) != 0) {  // (then no turns: as before)
    ::close(fd_);
    fd_ = -1;
  }
}

ContextTurn::~ContextTurn() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

GpuShare::GpuShare(const std::string& device) {
  const fs::path file = gpu_lock_file(device);
  if (file.empty()) return;
  fd_ = open_lock_file(engine_lock_file(file));
  if (fd_ >= 0 && flock_retrying(fd_, LOCK_SH) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

GpuShare::~GpuShare() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace kernelllm::harness
