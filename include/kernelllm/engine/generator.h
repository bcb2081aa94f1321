// Generation: k samples of one prompt. The prompt is prefilled once into one sequence and
// forked k times (its KV shared), then all k decode together in one batch per step until
// each hits a stop id or max_new_tokens. Sample i at step t draws with
// (seed, sample index i, step t), so results do not depend on k or on batching.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {

struct GenerateOptions {
  int32_t num_samples = 1;
  int32_t max_new_tokens = 2048;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;       // generation stops after emitting one (not decoded into text)
  bool skip_special_tokens = true;     // in returned and streamed text
};

enum class FinishReason { stop, length, cancelled };

std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled"

struct Completion {
  std::vector<int32_t> tokens;  // generated ids, including the stop id when finish == stop
  std::string text;             // decoded generated ids (prompt not included)
  FinishReason finish = FinishReason::length;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // over all samples
  double prefill_ms = 0;
  double decode_ms = 0;
};

// Called with complete UTF-8 text as it is generated; return false to cancel everything.
using StreamCallback = std::function<bool(int32_t sample_index, std::string_view text)>;

// Called once for each sample as soon as it stops (a stop id or max_new_tokens) with its whole
// completion, while the others may still decode; not for samples a cancel cut short.
using SampleDoneCallback = std::function<void(int32_t sample_index, const Completion& completion)>;

Result<std::vector<Completion>> generate(Backend& backend, const Tokenizer& tokenizer,
                                         std::span<const int32_t> prompt_ids, const GenerateOptions& options,
                                         const StreamCallback& on_text = {}, GenerateStats* stats = nullptr,
                                         const SampleDoneCallback& on_done = {});

}  // namespace kernelllm
