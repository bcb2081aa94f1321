// Progress lines for long CLI work (verify, eval): "<command>: <what>, elapsed 1m05s, ETA 2m10s"
// on stderr, at most one every few seconds, only when stderr is a terminal or --progress asks.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include <fmt/format.h>

namespace kernelllm::cli {

inline std::string duration_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

class ProgressMeter {
 public:
  static constexpr double kMinIntervalS = 3.0;

  ProgressMeter(std::string command, bool forced) : command_(std::move(command)), enabled_(forced || ::isatty(STDERR_FILENO) == 1) {}

  bool enabled() const { return enabled_; }

  // `done` of `total` units are finished; the ETA assumes the rest take as long on average.
  // `always` prints even within the interval (a phase's end).
  void update(size_t done, size_t total, const std::string& what, bool always = false) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mu_);
    const double now = elapsed_s();
    if (!always && now - last_s_ < kMinIntervalS) return;
    last_s_ = now;
    std::string eta = "ETA unknown";
    if (done >= total) eta = "done";
    else if (done > 0) eta = "ETA " + duration_text(now / static_cast<double>(done) * static_cast<double>(total - done));
    std::fprintf(stderr, "%s: %s, elapsed %s, %s\n", command_.c_str(), what.c_str(), duration_text(now).c_str(), eta.c_str());
    std::fflush(stderr);
  }

  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::string command_;
  bool enabled_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_s_ = -1e9;
};

}  // namespace kernelllm::cli
