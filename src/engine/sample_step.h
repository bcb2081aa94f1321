// One decode step of the samples, in two phases, so that a request's tokens are the same
// whether generate() or the Scheduler runs it: draw_tokens draws token `step` of sample `index`
// for every draw at once (pure, so in parallel; Backend::forward_sample's host default), then
// apply_token appends each token in sample order: stop on a stop id, stream its text, stop at
// max_new_tokens or the position limit.
#pragma once

#include <cstdint>
#include <span>

#include "kernelllm/engine/generator.h"

namespace kernelllm {

struct TokenDraw {
  std::span<const float> row;       // [vocab] logits the token is drawn from
  const SamplingParams* params = nullptr;
  uint64_t index = 0;               // sample index
  uint64_t step = 0;                // tokens the sample has generated so far
  int32_t token = 0;                // out: sample_token(row, *params, index, step)
};

// Fills every draw's token. Two or more sampled (temperature > 0) draws, or four or more
// greedy ones over a large vocabulary, run on a process-wide pool of min(hardware threads, 16)
// threads; the tokens do not depend on it.
void draw_tokens(std::span<TokenDraw> draws);

struct SampleStepResult {
  bool alive = false;       // the sample needs another forward with its new token
  bool cancel = false;      // the stream callback asked to cancel everything
};

SampleStepResult apply_token(int32_t token, const GenerateOptions& options, uint64_t index, int64_t prompt_tokens,
                             int64_t max_positions, Completion& out, StreamDecoder& decoder,
                             const StreamCallback& on_text);

}  // namespace kernelllm
