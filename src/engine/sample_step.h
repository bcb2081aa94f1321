// One decode step of one sample, shared by generate() and the Scheduler so that a request's
// tokens are the same whichever runs it: draw token `step` of sample `index` from its logits
// row, append it, stop on a stop id, stream its text, stop at max_new_tokens or the position limit.
#pragma once

#include <cstdint>
#include <span>

#include "kernelllm/engine/generator.h"

namespace kernelllm {

struct SampleStepResult {
  bool alive = false;       // the sample needs another forward with its new token
  bool cancel = false;      // the stream callback asked to cancel everything
};

SampleStepResult advance_sample(std::span<const float> logits_row, const GenerateOptions& options, uint64_t index,
                                uint64_t step, int64_t prompt_tokens, int64_t max_positions, Completion& out,
                                StreamDecoder& decoder, const StreamCallback& on_text);

}  // namespace kernelllm
