// GPU use accounting and the GPU guard of one hold: GpuUseStats (waits and holds per kind of
// work, yields), OpStats (judge ops' time) and GpuUse (a shared or exclusive hold that a shared
// candidate load or run gives up to a waiting timer once the GPU is idle; gpu_lock.h).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "verifier.h"

namespace kernelllm::harness {

void GpuUseStats::add(const std::string& what, bool exclusive, double wait_ms, double hold_ms, double timer_waited_ms) {
  std::lock_guard lock(mu_);
  Entry& e = by_what_[what];
  e.exclusive = exclusive;
  e.timer_waited_ms += timer_waited_ms;
  ++e.n;
  e.wait_ms += wait_ms;
  e.hold_ms += hold_ms;
  e.max_hold_ms = std::max(e.max_hold_ms, hold_ms);
}

void OpStats::add(const std::string& op, double ms) {
  std::lock_guard lock(mu_);
  Entry& e = by_op_[op];
  ++e.n;
  e.ms += ms;
  e.max_ms = std::max(e.max_ms, ms);
}

Json OpStats::to_json() const {
  std::lock_guard lock(mu_);
  Json j = Json::object();
  for (const auto& [op, e] : by_op_) j[op] = Json{{"n", e.n}, {"ms", e.ms}, {"max_ms", e.max_ms}};
  return j;
}

void GpuUseStats::add_yield(const std::string& what, double stopped_ms, double wait_ms) {
  std::lock_guard lock(mu_);
  Entry& e = by_what_[what];
  ++e.yields;
  e.yield_ms += stopped_ms;
  e.wait_ms += wait_ms;
}

Json GpuUseStats::to_json() const {
  std::lock_guard lock(mu_);
  Json j = Json::object();
  for (const auto& [what, e] : by_what_) {
    j[what] = Json{{"mode", e.exclusive ? "exclusive" : "shared"}, {"n", e.n}, {"wait_ms", e.wait_ms}, {"hold_ms", e.hold_ms},
                   {"max_hold_ms", e.max_hold_ms}};
    if (!e.exclusive) j[what]["timer_waited_ms"] = e.timer_waited_ms;
    if (e.yields > 0) {
      j[what]["yields"] = e.yields;
      j[what]["yield_ms"] = e.yield_ms;
    }
  }
  return j;
}

double GpuUseStats::exclusive_hold_ms() const {
  std::lock_guard lock(mu_);
  double ms = 0;
  for (const auto& [what, e] : by_what_) {
    if (e.exclusive) ms += e.hold_ms;
  }
  return ms;
}

GpuUse::GpuUse(DeviceState& dev, GpuGuard::Mode mode, std::string what, GpuUseStats& stats)
    : mu_(&dev.root().gpu_mu), file_(dev.root().gpu_lock), stats_(stats), what_(std::move(what)) {
  if (mode == GpuGuard::Mode::shared && !dev.cuda()) return;  // correctness work on the CPU takes nothing
  const auto t0 = std::chrono::steady_clock::now();
  // Every exclusive taking (timing, profiling) asks the holders to yield while it waits.
  guard_.emplace(*mu_, file_, mode, /*ask_yield=*/mode == GpuGuard::Mode::exclusive);
  held_since_ = std::chrono::steady_clock::now();
  wait_ms_ = std::chrono::duration<double, std::milli>(held_since_ - t0).count();
}

GpuUse::~GpuUse() {
  if (yield_fd_ >= 0) ::close(yield_fd_);
  if (!guard_) return;
  hold_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - held_since_).count();
  timer_waited_ms_ += guard_->timer_waited_ms();
  stats_.add(what_, guard_->mode() == GpuGuard::Mode::exclusive, wait_ms_, hold_ms_, timer_waited_ms_);
}

void GpuUse::continue_as(std::string what) {
  if (guard_) {
    const auto now = std::chrono::steady_clock::now();
    hold_ms_ += std::chrono::duration<double, std::milli>(now - held_since_).count();
    stats_.add(what_, guard_->mode() == GpuGuard::Mode::exclusive, wait_ms_, hold_ms_);
    held_since_ = now;
  }
  what_ = std::move(what);
  wait_ms_ = hold_ms_ = timer_waited_ms_ = 0;
}

double GpuUse::yield_for_timer(Process& proc, const IdleLook& look) {
  if (!guard_ || guard_->mode() != GpuGuard::Mode::shared || no_more_yields_) return 0;
  if (std::chrono::duration<double, std::milli>(Clock::now() - held_since_).count() < kYieldAfterMs) return 0;
  if (yield_fd_ == -2) yield_fd_ = GpuGuard::open_yield_file(file_);
  if (Clock::now() < next_look_ || !GpuGuard::yield_wanted(*mu_, yield_fd_)) return 0;
  const auto t0 = Clock::now();
  bool paused = false;
  // Stopped before the look: nothing of the candidate's may start on the GPU once the timer holds it.
  const GpuIdle state = look([&] {
    paused = proc.pause();
    return paused && proc.wait_stopped(deadline_in(1));
  });
  const double stopped_s = paused ? std::chrono::duration<double>(Clock::now() - t0).count() : 0.0;
  if (state != GpuIdle::idle) {
    if (paused) proc.resume();
    if (state == GpuIdle::not_now) return stopped_s;  // the judge was busy: looked at again next time
    // Busy: others' work not yet stopped, or this candidate's kernel that does not end; unknown:
    // the judge could not look. After kMaxBusy such looks, kBusyBackoffS apart, the hold keeps the
    // lock to its end, as without yielding. The time stopped is the request's either way.
    if (++busy_seen_ >= kMaxBusy) no_more_yields_ = true;
    next_look_ = Clock::now() + std::chrono::milliseconds(static_cast<int>(kBusyBackoffS * 1e3));
    return stopped_s;
  }
  const GpuGuard::Mode mode = guard_->mode();
  hold_ms_ += std::chrono::duration<double, std::milli>(t0 - held_since_).count();
  timer_waited_ms_ += guard_->timer_waited_ms();  // (the stop and the look included)
  guard_.reset();
  const auto t_wait = Clock::now();
  guard_.emplace(*mu_, file_, mode);  // after the timer (and any other that went first)
  held_since_ = Clock::now();
  proc.resume();
  const double wait_ms = std::chrono::duration<double, std::milli>(held_since_ - t_wait).count();
  const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.add_yield(what_, total_s * 1e3, wait_ms);
  return total_s;
}

}  // namespace kernelllm::harness
