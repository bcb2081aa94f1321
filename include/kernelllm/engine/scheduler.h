// Continuous batching: several requests (each a prompt and k samples) in flight on one
// backend. Every step admits queued requests while capacity allows (FIFO), prefills each
// new prompt once and forks it k times, then decodes ALL live samples of ALL requests in
// one batched Backend::forward. Requests finish independently. A request's tokens equal a
// solo generate() of it: sample i at step t draws with (seed, i, t) whatever else runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {

struct SchedulerOptions {
  // Live backend sequences at once, over all requests. A request holds k sequences while it
  // decodes and k + 1 for the moment of its prefill and forks.
  int64_t max_sequences = 64;
  // KV positions reserved at once; 0 → unlimited. A request reserves
  // prompt + k × max_new_tokens (the prompt's KV is shared by its k forks).
  int64_t max_kv_tokens = 0;
};

using RequestId = int64_t;

struct RequestResult {
  std::vector<Completion> completions;  // one per sample, in sample order
  GenerateStats stats;                  // prefill_ms: its prefill; decode_ms: admission to end
};

class Scheduler {
 public:
  // `backend` and `tokenizer` must outlive the scheduler.
  Scheduler(Backend& backend, const Tokenizer& tokenizer, SchedulerOptions options = {});
  ~Scheduler();  // releases every sequence still held
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Errors (nothing queued): the checks generate() makes (k >= 1,
  // max_new_tokens >= 0, non-empty prompt within max_position_embeddings, valid sampling,
  // token ids inside the vocabulary) and a request that could never fit the capacity.
  // `on_text` is called as in generate(); returning false cancels this request only.
  Result<RequestId> submit(std::vector<int32_t> prompt_ids, GenerateOptions options, StreamCallback on_text = {});

  // Ends a queued or running request: its live samples finish as `cancelled`, its result
  // becomes available. Unknown or finished ids are ignored.
  void cancel(RequestId id);

  // One scheduling step: admit, prefill, sample, one batched decode forward. A backend
  // error is returned and fails every running request (their results carry it).
  Status step();
  // Steps until nothing is queued or running.
  Status run_until_idle();

  bool idle() const;
  int64_t queued() const;
  int64_t running() const;
  int64_t live_sequences() const { return live_sequences_; }
  int64_t reserved_kv_tokens() const { return reserved_kv_tokens_; }

  // The result of a finished request, handed over once (later calls: not_found).
  // A request still queued or running: unavailable → ErrorCode::out_of_range.
  Result<RequestResult> take_result(RequestId id);

 private:
  struct Request;
  struct Sample;
  bool fits(const Request& r) const;
  Status admit(Request& r);
  // Applies each live sample's drawn token; those still running join the batch, with the draw
  // of their next token.
  void sample_request(Request& r, std::vector<ForwardRequest>& batch, std::vector<Sample*>& rows,
                      std::vector<RowDraw>& draws);
  void finish(Request& r);
  void fail_running(const Status& status);

  Backend& backend_;
  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  RequestId next_id_ = 0;
  std::vector<std::unique_ptr<Request>> queue_;    // FIFO, not yet admitted
  std::vector<std::unique_ptr<Request>> running_;  // admitted, in admission order
  std::map<RequestId, Result<RequestResult>> done_;
  int64_t live_sequences_ = 0;
  int64_t reserved_kv_tokens_ = 0;
};

}  // namespace kernelllm
