// The server's engine thread: it alone owns the backend's Scheduler and steps it while work
// exists. HTTP handler threads submit tokenized requests through a mutex-protected queue and
// read streamed text and the final result from a per-request channel; a channel cancelled by
// its reader (the client went away) cancels its request at the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernelllm/engine/scheduler.h"

namespace kernelllm::serve {

// Holds back text that may be the start of a stop string; cuts at the first stop string found.
class StopFilter {
 public:
  explicit StopFilter(const std::vector<std::string>* stops) : stops_(stops) {}
  // The text that is safe to emit now (possibly empty).
  std::string push(std::string_view text);
  std::string finish();  // what was held back, when no stop string came
  bool stopped() const { return stopped_; }

 private:
  const std::vector<std::string>* stops_;
  std::string held_;
  bool stopped_ = false;
};

struct StreamPiece {
  int32_t sample = 0;
  std::string text;
};

// One request's mailbox between the engine thread (writer) and its handler (reader).
class RequestChannel {
 public:
  RequestChannel(int32_t samples, std::vector<std::string> stops);

  // Engine thread. push_text returns false when the request should end (cancelled, or every
  // sample has met a stop string).
  bool push_text(int32_t sample, std::string_view text);
  void finish(Result<RequestResult> result);

  // Reader: waits up to `timeout` for text or the end; moves out the pieces so far. Returns the
  // result, once, when the request has ended (the held-back text of each sample flushed into `pieces`).
  std::optional<Result<RequestResult>> wait(std::chrono::milliseconds timeout, std::vector<StreamPiece>& pieces);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Whether sample i ended on a stop string (valid after the result arrived).
  bool stopped_by_string(int32_t sample) const;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> stops_;  // before filters_: they point at it
  std::vector<StopFilter> filters_;
  std::vector<StreamPiece> pieces_;
  std::optional<Result<RequestResult>> result_;
  std::atomic<bool> cancelled_{false};
};

struct EngineLoopStats {
  int64_t requests_finished = 0;
  int64_t generated_tokens = 0;
  int64_t running = 0;
  int64_t queued = 0;
};

class EngineLoop {
 public:
  // `backend` and `tokenizer` must outlive the loop. Starts the engine thread.
  EngineLoop(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request; its text and result arrive on the returned channel. Scheduler::submit's
  // errors (and a stopped loop) arrive there as the result.
  std::shared_ptr<RequestChannel> submit(std::vector<int32_t> prompt_ids, GenerateOptions options,
                                         std::vector<std::string> stops = {});
  // Ends the thread; requests not finished get an `unavailable` result.
  void stop();
  EngineLoopStats stats() const;

 private:
  struct Job {
    std::vector<int32_t> prompt;
    GenerateOptions options;
    std::shared_ptr<RequestChannel> channel;
  };
  void run();

  Backend& backend_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> incoming_;
  bool stopping_ = false;
  EngineLoopStats stats_;
  std::thread thread_;  // last: started after everything above exists
};

}  // namespace kernelllm::serve
