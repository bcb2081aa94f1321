// The engine thread and the channels it writes to (see engine_loop.h). Only run() touches the
// Scheduler; everything shared with handler threads is behind a mutex or atomic.
#include "kernelllm/serve/engine_loop.h"

#include <algorithm>
#include <map>

namespace kernelllm::serve {

std::string StopFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : *stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest tail that could begin a stop string.
  size_t keep = 0;
  for (const std::string& s : *stops_) {
    if (s.empty()) continue;
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopFilter::finish() {
  std::string out = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  return out;
}

RequestChannel::RequestChannel(int32_t samples, std::vector<std::string> stops) : stops_(std::move(stops)) {
  filters_.reserve(static_cast<size_t>(samples));
  for (int32_t i = 0; i < samples; ++i) filters_.emplace_back(&stops_);
}

bool RequestChannel::push_text(int32_t sample, std::string_view text) {
  if (cancelled_) return false;
  std::lock_guard lock(mu_);
  if (sample < 0 || static_cast<size_t>(sample) >= filters_.size()) return true;
  std::string out = filters_[static_cast<size_t>(sample)].push(text);
  if (!out.empty()) {
    pieces_.push_back({sample, std::move(out)});
    cv_.notify_all();
  }
  return !std::all_of(filters_.begin(), filters_.end(), [](const StopFilter& f) { return f.stopped(); });
}

void RequestChannel::finish(Result<RequestResult> result) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < filters_.size(); ++i) {
    std::string rest = filters_[i].finish();
    if (!rest.empty()) pieces_.push_back({static_cast<int32_t>(i), std::move(rest)});
  }
  result_ = std::move(result);
  cv_.notify_all();
}

std::optional<Result<RequestResult>> RequestChannel::wait(std::chrono::milliseconds timeout,
                                                          std::vector<StreamPiece>& pieces) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !pieces_.empty() || result_.has_value(); });
  for (StreamPiece& p : pieces_) pieces.push_back(std::move(p));
  pieces_.clear();
  if (!result_) return std::nullopt;
  std::optional<Result<RequestResult>> out = std::move(result_);
  result_.reset();  // handed over once
  return out;
}

bool RequestChannel::stopped_by_string(int32_t sample) const {
  return sample >= 0 && static_cast<size_t>(sample) < filters_.size() && filters_[static_cast<size_t>(sample)].stopped();
}

EngineLoop::EngineLoop(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options)
    : backend_(backend), tokenizer_(tokenizer), options_(options), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<RequestChannel> EngineLoop::submit(std::vector<int32_t> prompt_ids, GenerateOptions options,
                                                   std::vector<std::string> stops) {
  auto channel = std::make_shared<RequestChannel>(std::max(options.num_samples, 0), std::move(stops));
  std::lock_guard lock(mu_);
  if (stopping_) {
    channel->finish(error(ErrorCode::resource_exhausted, "the server is shutting down"));
    return channel;
  }
  incoming_.push_back(Job{std::move(prompt_ids), std::move(options), channel});
  cv_.notify_all();
  return channel;
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

EngineLoopStats EngineLoop::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EngineLoop::run() {
  Scheduler scheduler(backend_, tokenizer_, options_);
  std::map<RequestId, std::shared_ptr<RequestChannel>> in_flight;
  for (;;) {
    std::deque<Job> jobs;
    {
      std::unique_lock lock(mu_);
      // Sleep only when there is nothing to step.
      cv_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !scheduler.idle(); });
      if (stopping_) break;
      jobs.swap(incoming_);
    }
    for (Job& job : jobs) {
      std::shared_ptr<RequestChannel> ch = job.channel;
      StreamCallback on_text = [ch](int32_t sample, std::string_view text) { return ch->push_text(sample, text); };
      Result<RequestId> id = scheduler.submit(std::move(job.prompt), std::move(job.options), std::move(on_text));
      if (!id.ok()) {
        ch->finish(id.status());
        continue;
      }
      in_flight.emplace(*id, std::move(ch));
    }
    for (auto& [id, ch] : in_flight) {
      if (ch->cancelled()) scheduler.cancel(id);
    }
    // A backend error fails the running requests; their results carry it, so it is not lost here.
    if (!scheduler.idle()) (void)scheduler.step();

    int64_t finished = 0, tokens = 0;
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      Result<RequestResult> r = scheduler.take_result(it->first);
      if (!r.ok() && r.status().code() == ErrorCode::out_of_range) {  // still running
        ++it;
        continue;
      }
      if (r.ok()) tokens += r->stats.generated_tokens;
      ++finished;
      it->second->finish(std::move(r));
      it = in_flight.erase(it);
    }
    std::lock_guard lock(mu_);
    stats_.requests_finished += finished;
    stats_.generated_tokens += tokens;
    stats_.running = scheduler.running();
    stats_.queued = scheduler.queued();
  }
  for (auto& [id, ch] : in_flight) ch->finish(error(ErrorCode::resource_exhausted, "the server is shutting down"));
  std::lock_guard lock(mu_);
  for (Job& job : incoming_) job.channel->finish(error(ErrorCode::resource_exhausted, "the server is shutting down"));
  incoming_.clear();
}

}  // namespace kernelllm::serve
