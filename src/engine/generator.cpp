// k-sample generation: one prefill of the prompt, k forks sharing its KV, then one batched
// forward per step over the samples still running. Sample i at step t draws with
// sample_token(logits, params, i, t) (Backend::forward_sample), so a sample's tokens depend
// only on (seed, i), not on k, batching, which other samples already stopped, or the threads
// that drew them.
#include "kernelllm/engine/generator.h"

#include "engine/sample_step.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "kernelllm/base/thread_pool.h"

namespace kernelllm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Releases every sequence it holds when generation ends, however it ends.
class SequenceSet {
 public:
  explicit SequenceSet(Backend& backend) : backend_(backend) {}
  ~SequenceSet() {
    for (SeqId s : ids_) backend_.release_sequence(s);
  }
  SequenceSet(const SequenceSet&) = delete;
  SequenceSet& operator=(const SequenceSet&) = delete;
  void add(SeqId s) { ids_.push_back(s); }
  void release(SeqId s) {
    backend_.release_sequence(s);
    ids_.erase(std::remove(ids_.begin(), ids_.end(), s), ids_.end());
  }

 private:
  Backend& backend_;
  std::vector<SeqId> ids_;
};

Status check_options(const Backend& backend, std::span<const int32_t> prompt_ids, const GenerateOptions& options) {
  if (options.num_samples < 1) {
    return error(ErrorCode::invalid_argument,
                 "generate: expected num_samples >= 1, found " + std::to_string(options.num_samples));
  }
  if (options.max_new_tokens < 0) {
    return error(ErrorCode::invalid_argument,
                 "generate: expected max_new_tokens >= 0, found " + std::to_string(options.max_new_tokens));
  }
  if (prompt_ids.empty()) return error(ErrorCode::invalid_argument, "generate: expected a non-empty prompt");
  const int64_t max_pos = backend.config().max_position_embeddings;
  if (static_cast<int64_t>(prompt_ids.size()) > max_pos) {
    return error(ErrorCode::out_of_range, "generate: prompt of " + std::to_string(prompt_ids.size()) +
                                              " tokens exceeds max_position_embeddings " + std::to_string(max_pos));
  }
  return validate(options.sampling);
}

struct SampleState {
  SeqId seq = -1;
  bool alive = true;
  StreamDecoder decoder;
  Completion out;
  bool finished = false;  // its decoder's rest flushed and on_done called
};

}  // namespace

Result<std::vector<Completion>> generate(Backend& backend, const Tokenizer& tokenizer,
                                         std::span<const int32_t> prompt_ids, const GenerateOptions& options,
                                         const StreamCallback& on_text, GenerateStats* stats,
                                         const SampleDoneCallback& on_done) {
  KLLM_RETURN_IF_ERROR(check_options(backend, prompt_ids, options));
  const int64_t max_pos = backend.config().max_position_embeddings;
  GenerateStats local_stats;
  local_stats.prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  SequenceSet sequences(backend);

  const auto t_prefill = Clock::now();
  KLLM_ASSIGN_OR_RETURN(SeqId prompt_seq, backend.create_sequence());
  sequences.add(prompt_seq);
  // Every pass draws the next token of each sample it feeds (Backend::forward_sample: the CUDA
  // backend can draw on the device and copy back ids only); the prefill draws every sample's
  // first token from the prompt's last row.
  const auto k = static_cast<size_t>(options.num_samples);
  std::vector<RowDraw> draws;
  std::vector<int32_t> drawn;
  if (options.max_new_tokens > 0) {
    for (size_t i = 0; i < k; ++i) draws.push_back(RowDraw{0, options.sampling, i, 0});
  }
  const ForwardRequest prefill{prompt_seq, prompt_ids, false};
  KLLM_RETURN_IF_ERROR(backend.forward_sample({&prefill, 1}, draws, drawn));
  local_stats.prefill_ms = ms_since(t_prefill);

  std::vector<SampleState> samples;
  samples.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    KLLM_ASSIGN_OR_RETURN(SeqId s, backend.fork_sequence(prompt_seq));
    sequences.add(s);
    samples.push_back(SampleState{s, options.max_new_tokens > 0, StreamDecoder(tokenizer, options.skip_special_tokens), {}});
  }
  sequences.release(prompt_seq);  // the forks keep its pages

  // drawn[d] is the next token of sample draws[d].index (the samples still running, in order).
  bool cancelled = false;
  // A stopped sample: the decoder's held-back bytes streamed, then its completion handed over.
  auto finish_sample = [&](size_t i) {
    SampleState& s = samples[i];
    std::string rest = s.decoder.finish();
    if (!rest.empty()) {
      s.out.text += rest;
      if (on_text && !cancelled) cancelled = !on_text(static_cast<int32_t>(i), rest);
    }
    s.finished = true;
    if (on_done && !cancelled) on_done(static_cast<int32_t>(i), s.out);
  };
  const auto t_decode = Clock::now();
  for (uint64_t step = 0; !drawn.empty(); ++step) {
    std::vector<ForwardRequest> batch;
    std::vector<RowDraw> next;
    for (size_t d = 0; d < drawn.size() && !cancelled; ++d) {
      const auto i = static_cast<size_t>(draws[d].index);
      SampleState& s = samples[i];
      const SampleStepResult res = apply_token(drawn[d], options, i, static_cast<int64_t>(prompt_ids.size()), max_pos,
                                               s.out, s.decoder, on_text);
      ++local_stats.generated_tokens;
      cancelled = cancelled || res.cancel;
      s.alive = res.alive;
      if (!s.alive) {
        if (!cancelled) finish_sample(i);
        continue;
      }
      next.push_back(RowDraw{static_cast<int64_t>(batch.size()), options.sampling, i, step + 1});
      batch.push_back(ForwardRequest{s.seq, {&s.out.tokens.back(), 1}, false});
    }
    if (cancelled) {
      for (SampleState& s : samples) {
        if (s.alive) s.out.finish = FinishReason::cancelled;
        s.alive = false;
      }
      break;
    }
    draws = std::move(next);
    drawn.clear();
    if (batch.empty()) break;
    KLLM_RETURN_IF_ERROR(backend.forward_sample(batch, draws, drawn));
  }
  local_stats.decode_ms = ms_since(t_decode);

  std::vector<Completion> out;
  out.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    if (!samples[i].finished) finish_sample(i);  // max_new_tokens 0, or cut short by a cancel
    out.push_back(std::move(samples[i].out));
  }
  if (stats != nullptr) *stats = local_stats;
  return out;
}

void draw_tokens(std::span<TokenDraw> draws) {
  const auto draw = [&](size_t i) {
    TokenDraw& d = draws[i];
    d.token = sample_token(d.row, *d.params, d.index, d.step);
  };
  const auto sampled = std::count_if(draws.begin(), draws.end(),
                                     [](const TokenDraw& d) { return d.params->temperature != 0.0f; });
  // Greedy draws are one argmax each (~20 us on a 128k row): worth the pool only for many rows.
  const bool many_greedy = draws.size() >= 4 && draws.front().row.size() >= 16384;
  if (sampled < 2 && !many_greedy) {
    for (size_t i = 0; i < draws.size(); ++i) draw(i);
    return;
  }
  // Draws take ~0.1-5 ms each (sampler.cpp) and vary with the row, so workers take the next
  // undrawn one rather than a fixed share.
  static ThreadPool pool(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u)));
  std::atomic<size_t> next{0};
  const auto workers = std::min<int64_t>(pool.size(), static_cast<int64_t>(draws.size()));
  pool.parallel_for(workers, [&](int64_t, int64_t) {
    for (size_t i = next++; i < draws.size(); i = next++) draw(i);
  });
}

SampleStepResult apply_token(int32_t tok, const GenerateOptions& options, uint64_t index, int64_t prompt_tokens,
                             int64_t max_positions, Completion& out, StreamDecoder& decoder,
                             const StreamCallback& on_text) {
  SampleStepResult res;
  out.tokens.push_back(tok);
  if (std::find(options.stop_ids.begin(), options.stop_ids.end(), tok) != options.stop_ids.end()) {
    out.finish = FinishReason::stop;
    return res;
  }
  std::string piece = decoder.push(tok);
  if (!piece.empty()) {
    out.text += piece;
    if (on_text && !on_text(static_cast<int32_t>(index), piece)) res.cancel = true;
  }
  const auto generated = static_cast<int64_t>(out.tokens.size());
  if (generated >= options.max_new_tokens || prompt_tokens + generated >= max_positions) {
    out.finish = FinishReason::length;
    return res;
  }
  res.alive = true;
  return res;
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "unknown";
}

}  // namespace kernelllm
