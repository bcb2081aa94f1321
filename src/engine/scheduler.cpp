// Continuous batching over the Backend interface (see scheduler.h). The per-sample loop
// mirrors generate() token for token (stop ids, length limits, streaming, cancellation), so
// a request's completions equal a solo generate() of it; only the batch it rides in differs.
#include "kernelllm/engine/scheduler.h"

#include "engine/sample_step.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace kernelllm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace

struct Scheduler::Sample {
  int32_t index = 0;
  SeqId seq = -1;
  bool alive = false;
  StreamDecoder decoder;
  Completion out;
  int32_t drawn = 0;  // its next token, drawn by the pass that fed it (Backend::forward_sample)
};

struct Scheduler::Request {
  RequestId id = 0;
  std::vector<int32_t> prompt;
  GenerateOptions options;
  StreamCallback on_text;
  int64_t kv_tokens = 0;              // reservation: prompt + k × max_new_tokens
  std::vector<Sample> samples;        // reserved to k before filling: rows point into it
  bool cancelled = false;
  GenerateStats stats;
  Clock::time_point decode_start;
};

Scheduler::Scheduler(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options)
    : backend_(backend), tokenizer_(tokenizer), options_(options) {}

Scheduler::~Scheduler() {
  for (auto& r : running_) {
    for (Sample& s : r->samples) {
      if (s.seq >= 0) backend_.release_sequence(s.seq);
    }
  }
}

Result<RequestId> Scheduler::submit(std::vector<int32_t> prompt_ids, GenerateOptions options, StreamCallback on_text) {
  const std::string where = "scheduler: request " + std::to_string(next_id_) + ": ";
  if (options.num_samples < 1) {
    return error(ErrorCode::invalid_argument,
                 where + "expected num_samples >= 1, found " + std::to_string(options.num_samples));
  }
  if (options.max_new_tokens < 0) {
    return error(ErrorCode::invalid_argument,
                 where + "expected max_new_tokens >= 0, found " + std::to_string(options.max_new_tokens));
  }
  if (prompt_ids.empty()) return error(ErrorCode::invalid_argument, where + "expected a non-empty prompt");
  const ModelConfig& config = backend_.config();
  if (static_cast<int64_t>(prompt_ids.size()) > config.max_position_embeddings) {
    return error(ErrorCode::out_of_range, where + "prompt of " + std::to_string(prompt_ids.size()) +
                                              " tokens exceeds max_position_embeddings " +
                                              std::to_string(config.max_position_embeddings));
  }
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    if (prompt_ids[i] < 0 || prompt_ids[i] >= config.vocab_size) {
      return error(ErrorCode::out_of_range, where + "prompt token " + std::to_string(i) + ": expected an id in [0, " +
                                                std::to_string(config.vocab_size) + "), found " +
                                                std::to_string(prompt_ids[i]));
    }
  }
  if (Status s = validate(options.sampling); !s.ok()) return s.with_context(where + "sampling");

  auto r = std::make_unique<Request>();
  r->id = next_id_;
  r->kv_tokens = static_cast<int64_t>(prompt_ids.size()) +
                 int64_t{options.num_samples} * int64_t{options.max_new_tokens};
  if (options.num_samples + 1 > options_.max_sequences) {
    return error(ErrorCode::resource_exhausted,
                 where + "needs " + std::to_string(options.num_samples + 1) +
                     " sequences (k samples + the prompt), the scheduler allows " +
                     std::to_string(options_.max_sequences));
  }
  if (options_.max_kv_tokens > 0 && r->kv_tokens > options_.max_kv_tokens) {
    return error(ErrorCode::resource_exhausted,
                 where + "needs " + std::to_string(r->kv_tokens) +
                     " KV tokens (prompt + k × max_new_tokens), the scheduler allows " +
                     std::to_string(options_.max_kv_tokens));
  }
  r->prompt = std::move(prompt_ids);
  r->options = std::move(options);
  r->on_text = std::move(on_text);
  r->stats.prompt_tokens = static_cast<int64_t>(r->prompt.size());
  ++next_id_;
  const RequestId id = r->id;
  queue_.push_back(std::move(r));
  return id;
}

void Scheduler::cancel(RequestId id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if ((*it)->id != id) continue;
    RequestResult result;
    result.stats = (*it)->stats;
    result.completions.resize(static_cast<size_t>((*it)->options.num_samples));
    for (Completion& c : result.completions) c.finish = FinishReason::cancelled;
    done_.emplace(id, std::move(result));
    queue_.erase(it);
    return;
  }
  for (auto& r : running_) {
    if (r->id != id) continue;
    r->cancelled = true;
    for (Sample& s : r->samples) {
      if (s.alive) s.out.finish = FinishReason::cancelled;
      s.alive = false;
    }
    return;
  }
}

bool Scheduler::fits(const Request& r) const {
  if (live_sequences_ + r.options.num_samples + 1 > options_.max_sequences) return false;
  return options_.max_kv_tokens <= 0 || reserved_kv_tokens_ + r.kv_tokens <= options_.max_kv_tokens;
}

Status Scheduler::admit(Request& r) {
  const auto t0 = Clock::now();
  KLLM_ASSIGN_OR_RETURN(SeqId prompt_seq, backend_.create_sequence());
  ++live_sequences_;
  const ForwardRequest prefill{prompt_seq, r.prompt, false};
  // Every sample's first token, from the prompt's last row.
  const auto k = static_cast<size_t>(r.options.num_samples);
  std::vector<RowDraw> draws;
  if (r.options.max_new_tokens > 0) {
    for (size_t i = 0; i < k; ++i) draws.push_back(RowDraw{0, r.options.sampling, i, 0});
  }
  std::vector<int32_t> first;
  Status status = backend_.forward_sample({&prefill, 1}, draws, first);
  r.samples.reserve(k);
  for (size_t i = 0; i < k && status.ok(); ++i) {
    Result<SeqId> s = backend_.fork_sequence(prompt_seq);
    if (!s.ok()) {
      status = s.status();
      break;
    }
    ++live_sequences_;
    r.samples.push_back(Sample{static_cast<int32_t>(i), *s, r.options.max_new_tokens > 0,
                               StreamDecoder(tokenizer_, r.options.skip_special_tokens), {},
                               first.empty() ? 0 : first[i]});
  }
  backend_.release_sequence(prompt_seq);  // the forks keep its pages
  --live_sequences_;
  const auto t1 = Clock::now();
  r.stats.prefill_ms = ms_between(t0, t1);
  r.decode_start = t1;
  return status;
}

void Scheduler::sample_request(Request& r, std::vector<ForwardRequest>& batch, std::vector<Sample*>& rows,
                               std::vector<RowDraw>& draws) {
  const int64_t max_pos = backend_.config().max_position_embeddings;
  const GenerateOptions& o = r.options;
  const size_t first_row = batch.size();
  for (Sample& s : r.samples) {
    if (r.cancelled) break;
    if (!s.alive) continue;
    const SampleStepResult res = apply_token(s.drawn, o, static_cast<uint64_t>(s.index),
                                             static_cast<int64_t>(r.prompt.size()), max_pos, s.out, s.decoder,
                                             r.on_text);
    ++r.stats.generated_tokens;
    r.cancelled = r.cancelled || res.cancel;
    s.alive = res.alive;
    if (!s.alive) continue;
    // The pass draws the sample's next token: step = the tokens it has so far.
    draws.push_back(RowDraw{static_cast<int64_t>(batch.size()), o.sampling, static_cast<uint64_t>(s.index),
                            s.out.tokens.size()});
    batch.push_back(ForwardRequest{s.seq, {&s.out.tokens.back(), 1}, false});
    rows.push_back(&s);
  }
  if (r.cancelled) {
    batch.resize(first_row);
    rows.resize(first_row);
    draws.resize(first_row);
    for (Sample& s : r.samples) {
      if (s.alive) s.out.finish = FinishReason::cancelled;
      s.alive = false;
    }
  }
}

void Scheduler::finish(Request& r) {
  r.stats.decode_ms = ms_between(r.decode_start, Clock::now());
  RequestResult result;
  for (Sample& s : r.samples) {
    std::string rest = s.decoder.finish();
    if (!rest.empty()) {
      s.out.text += rest;
      if (r.on_text && !r.cancelled) r.cancelled = !r.on_text(s.index, rest);
    }
    backend_.release_sequence(s.seq);
    --live_sequences_;
    result.completions.push_back(std::move(s.out));
  }
  reserved_kv_tokens_ -= r.kv_tokens;
  result.stats = r.stats;
  done_.emplace(r.id, std::move(result));
}

void Scheduler::fail_running(const Status& status) {
  for (auto& r : running_) {
    for (Sample& s : r->samples) {
      backend_.release_sequence(s.seq);
      --live_sequences_;
    }
    reserved_kv_tokens_ -= r->kv_tokens;
    done_.emplace(r->id, status);
  }
  running_.clear();
}

Status Scheduler::step() {
  while (!queue_.empty() && fits(*queue_.front())) {
    std::unique_ptr<Request> r = std::move(queue_.front());
    queue_.erase(queue_.begin());
    reserved_kv_tokens_ += r->kv_tokens;
    if (Status s = admit(*r); !s.ok()) {
      for (Sample& sample : r->samples) {
        backend_.release_sequence(sample.seq);
        --live_sequences_;
      }
      reserved_kv_tokens_ -= r->kv_tokens;
      done_.emplace(r->id, s.with_context("scheduler: request " + std::to_string(r->id) + ": prefill"));
      continue;
    }
    running_.push_back(std::move(r));
  }

  std::vector<ForwardRequest> batch;
  std::vector<Sample*> rows;
  std::vector<RowDraw> draws;
  for (auto& r : running_) sample_request(*r, batch, rows, draws);

  // Requests whose samples all stopped leave before the forward; their sequences free up.
  std::vector<std::unique_ptr<Request>> still_running;
  for (auto& r : running_) {
    const bool any_alive = std::any_of(r->samples.begin(), r->samples.end(), [](const Sample& s) { return s.alive; });
    if (any_alive) {
      still_running.push_back(std::move(r));
    } else {
      finish(*r);
    }
  }
  running_ = std::move(still_running);
  if (batch.empty()) return {};

  std::vector<int32_t> drawn;
  if (Status s = backend_.forward_sample(batch, draws, drawn); !s.ok()) {
    fail_running(s);
    return s;
  }
  for (size_t i = 0; i < rows.size(); ++i) rows[i]->drawn = drawn[i];
  return {};
}

Status Scheduler::run_until_idle() {
  while (!idle()) KLLM_RETURN_IF_ERROR(step());
  return {};
}

bool Scheduler::idle() const { return queue_.empty() && running_.empty(); }
int64_t Scheduler::queued() const { return static_cast<int64_t>(queue_.size()); }
int64_t Scheduler::running() const { return static_cast<int64_t>(running_.size()); }

Result<RequestResult> Scheduler::take_result(RequestId id) {
  auto it = done_.find(id);
  if (it == done_.end()) {
    const auto has = [id](const auto& list) {
      return std::any_of(list.begin(), list.end(), [id](const auto& r) { return r->id == id; });
    };
    if (has(queue_) || has(running_)) {
      return error(ErrorCode::out_of_range, "scheduler: request " + std::to_string(id) + " has not finished");
    }
    return error(ErrorCode::not_found, "scheduler: no result for request " + std::to_string(id) +
                                           " (unknown, or already taken)");
  }
  Result<RequestResult> out = std::move(it->second);
  done_.erase(it);
  return out;
}

}  // namespace kernelllm
