// VerifySession (verify.h): a Verifier set up on a thread of its own before its candidates
// exist, then fed them as they come (Verifier::open_feed / add / close_feed).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {

// The session's own thread does the set-up, then verifies the candidates as they are added: the
// workers die with the thread that started them (PR_SET_PDEATHSIG), so one thread outlives them all.
struct VerifySession::State {
  std::mutex mu;
  std::condition_variable cv;
  size_t expected = 0;
  bool started = false, closed = false, abandoned = false;
  size_t capacity = 0, added = 0;
  std::vector<std::string> pending;  // added, not yet handed to the verifier
  std::function<void(size_t, const CandidateResult&)> on_result;
  std::optional<Result<VerifyReport>> report;
  double setup_ms = -1;
  // The verifier's cancel flag: set when the session is abandoned (so that a set-up under way
  // stops within its next wait instead of finishing), or relayed from the caller's own flag.
  std::atomic<bool> cancel{false};
  std::atomic<bool> done{false};
  std::thread runner, relay;
};

VerifySession::VerifySession(std::string problem_path, VerifyOptions options, size_t expected)
    : s_(std::make_unique<State>()) {
  State* st = s_.get();
  st->expected = std::max<size_t>(1, expected);
  if (const std::atomic<bool>* user = options.cancel) {
    st->relay = std::thread([st, user] {
      while (!st->done.load()) {
        if (user->load()) st->cancel.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  options.cancel = &st->cancel;
  st->runner = std::thread([st, problem = std::move(problem_path), options = std::move(options)]() mutable {
    const auto t0 = std::chrono::steady_clock::now();
    const std::atomic<bool>* cancel = options.cancel;
    Verifier v(problem, {}, std::move(options));
    Status ready = v.prepare(st->expected);
    std::unique_lock lock(st->mu);
    st->setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    st->cv.notify_all();
    st->cv.wait(lock, [&] { return st->started || st->abandoned; });
    if (st->abandoned) return;  // v's destructor stops the judges and the workers started ahead
    if (ready.ok()) v.open_feed(st->capacity, std::move(st->on_result));
    Status fed;
    for (;;) {
      st->cv.wait(lock, [&] { return !st->pending.empty() || st->closed || st->abandoned; });
      if (st->abandoned) return;
      std::vector<std::string> batch = std::move(st->pending);
      st->pending.clear();
      const bool last = st->closed;
      lock.unlock();
      for (const std::string& path : batch) {
        if (ready.ok() && fed.ok()) fed = v.add(path);
      }
      lock.lock();
      if (last && st->pending.empty()) break;
    }
    lock.unlock();
    // A refused add (none expected: the session and the verifier have the same capacity) ends the
    // feed as abandoned: ~Verifier verifies none of the others.
    if (!fed.ok()) st->cancel.store(true);  // and the ones under way stop at their next wait
    Result<VerifyReport> rep = !ready.ok() ? Result<VerifyReport>(ready) : !fed.ok() ? Result<VerifyReport>(fed) : v.close_feed();
    if (rep.ok() && cancel && cancel->load()) rep = error(ErrorCode::resource_exhausted, "verification cancelled");
    lock.lock();
    st->report = std::move(rep);
    st->cv.notify_all();
  });
}

VerifySession::~VerifySession() {
  {
    std::lock_guard lock(s_->mu);
    s_->abandoned = true;
    // Never closed (no candidates, or generation failed midway): the set-up or the verifications
    // under way stop at their next wait, their verdicts unused.
    if (!s_->report) s_->cancel.store(true);
  }
  s_->cv.notify_all();
  if (s_->runner.joinable()) s_->runner.join();
  s_->done.store(true);
  if (s_->relay.joinable()) s_->relay.join();
}

double VerifySession::setup_ms() const {
  std::lock_guard lock(s_->mu);
  return s_->setup_ms;
}

Status VerifySession::start(std::function<void(size_t, const CandidateResult&)> on_result, size_t capacity) {
  std::lock_guard lock(s_->mu);
  if (s_->started || s_->abandoned) return error(ErrorCode::invalid_argument, "verify: a session verifies one set of candidates");
  s_->started = true;
  s_->capacity = std::max(capacity, s_->expected);
  s_->on_result = std::move(on_result);
  s_->cv.notify_all();
  return {};
}

Result<size_t> VerifySession::add(const std::string& candidate_path) {
  std::lock_guard lock(s_->mu);
  if (!s_->started || s_->closed || s_->abandoned) {
    return error(ErrorCode::invalid_argument, "verify: candidates are added between start() and close()");
  }
  if (s_->added >= s_->capacity) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("verify: the session expected at most {} candidates, found another ({})", s_->capacity,
                             candidate_path));
  }
  s_->pending.push_back(candidate_path);
  s_->cv.notify_all();
  return s_->added++;
}

Result<VerifyReport> VerifySession::close() {
  std::unique_lock lock(s_->mu);
  if (!s_->started) return error(ErrorCode::invalid_argument, "verify: close() before start()");
  if (s_->added == 0) {
    // Nothing to verify: the set-up is not needed either.
    s_->abandoned = true;
    s_->cv.notify_all();
    return error(ErrorCode::invalid_argument, "verify: expected at least one candidate file");
  }
  s_->closed = true;
  s_->cv.notify_all();
  s_->cv.wait(lock, [&] { return s_->report.has_value(); });
  return std::move(*s_->report);
}

Result<VerifyReport> VerifySession::verify(const std::vector<std::string>& candidate_paths,
                                           std::function<void(size_t, const CandidateResult&)> on_result) {
  if (candidate_paths.empty()) return error(ErrorCode::invalid_argument, "verify: expected at least one candidate file");
  KLLM_RETURN_IF_ERROR(start(std::move(on_result), candidate_paths.size()));
  for (const std::string& c : candidate_paths) KLLM_RETURN_IF_ERROR(add(c).status());
  return close();
}

}  // namespace kernelllm::harness
