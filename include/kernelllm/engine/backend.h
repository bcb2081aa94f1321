// The engine's backend interface: a backend owns the model's weights in its own memory
// and the KV caches of the sequences it serves, and turns new tokens into logits.
// The CPU backend (src/engine/cpu) is the readable reference; the CUDA backend must
// produce the same logits within per-op tolerances.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/sampler.h"

namespace kernelllm {

class WeightStore;

using SeqId = int32_t;

struct ForwardRequest {
  SeqId seq = -1;
  std::span<const int32_t> tokens;  // new tokens, appended at positions len(seq) ...
  bool all_logits = false;          // logits for every new token, else only the last
};

// A token to draw from one logits row of a pass: sample_token(row, params, index, step).
struct RowDraw {
  int64_t row = 0;  // among the rows forward() returns for the batch
  SamplingParams params;
  uint64_t index = 0;  // the RNG counter (sampler.h): sample index and tokens it has so far
  uint64_t step = 0;
};

// Rows forward() returns for `batch`: each request's token count if all_logits, else 1.
int64_t output_rows(std::span<const ForwardRequest> batch);
// Rejects draws naming a row outside [0, output_rows(batch)) or with invalid params.
Status validate_draws(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual const ModelConfig& config() const = 0;

  // An empty sequence. Errors when the backend's sequence or KV capacity is exhausted.
  virtual Result<SeqId> create_sequence() = 0;
  // A new sequence holding the same tokens as `parent`. The parent's KV is shared, not
  // copied (copy-on-write for a partially filled page); both may then grow independently.
  virtual Result<SeqId> fork_sequence(SeqId parent) = 0;
  virtual void release_sequence(SeqId seq) = 0;
  virtual int64_t sequence_length(SeqId seq) const = 0;

  // Runs the model over each request's new tokens (several sequences in one batch),
  // appending their K/V. `logits` is resized and filled with rows of vocab_size floats:
  // for each request in order, one row per new token if all_logits, else one row.
  // Unknown sequences, empty token lists, ids outside the vocabulary and positions past
  // max_position_embeddings are errors, and then no sequence is modified.
  virtual Status forward(std::span<const ForwardRequest> batch, std::vector<float>& logits) = 0;

  // forward(), returning instead of each logits row its greedy token: argmax (sampler.h: the
  // first index of the largest logit). The default is forward_sample with one greedy draw per
  // row (forward() and argmax on the host); the CUDA backend finds it on the device and copies
  // back the ids only (4 bytes a row instead of 4 x vocab_size). Same errors and effects as
  // forward().
  virtual Status forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens);

  // forward(), returning instead of logits one token per draw (tokens[i] for draws[i]; several
  // draws may name one row). The default runs forward() and draws on the host (sample_token,
  // several rows in parallel). Bad draws (validate_draws) are errors before anything runs.
  virtual Status forward_sample(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                                std::vector<int32_t>& tokens);

  // Finishes and takes back work queued ahead of the caller (the CUDA backend's next decode
  // step, launched before it is asked for); nothing the caller sees changes. Timing code calls
  // it before starting a clock. The default has no such work.
  virtual Status settle() { return Status::ok_status(); }
};

struct CpuBackendOptions {
  int num_threads = 0;        // 0 → hardware concurrency
  int64_t max_sequences = 256;
  int64_t kv_page_tokens = 16;  // tokens per KV page; pages are shared between forks
};

// The CPU reference: fp32 compute over f32/f16/bf16 weights read in place from `weights`
// (which must outlive the backend). Validates every tensor's name, shape and dtype first.
Result<std::unique_ptr<Backend>> make_cpu_backend(const ModelConfig& config, const WeightStore& weights,
                                                   const CpuBackendOptions& options = {});

}  // namespace kernelllm
