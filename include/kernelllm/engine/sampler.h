// Token sampling: greedy, temperature, top-k, top-p; seeded with a counter-based RNG
// (Philox-4x32-10 keyed by the seed, counter = (sample index, step)) so that a given
// (seed, sample index, step) always draws the same number, whatever the batch or thread.
// Backend::forward_sample draws from here on the host by default; the CUDA backend's device
// sampler (src/engine/sample_block.h) uses the same RNG and semantics with its own exact
// integer arithmetic. Greedy tokens are this argmax; backends may find it where the logits are.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kernelllm/base/status.h"

namespace kernelllm {

// KernelLLM's sampling defaults (Meta's kernelllm.py: temperature 0.6, top_p 0.95): the CLI's
// generate/optimize/repl/eval, the server's optimize route and the Python package start from these.
inline constexpr float kKernelLLMTemperature = 0.6f;
inline constexpr float kKernelLLMTopP = 0.95f;

struct SamplingParams {
  float temperature = kKernelLLMTemperature;  // 0 → greedy (argmax, lowest id on ties)
  float top_p = 1.0f;        // (0, 1]; 1 disables
  int32_t top_k = 0;         // 0 disables
  uint64_t seed = 0;
};

// Rejects temperature < 0 or non-finite, top_p outside (0, 1], top_k < 0.
Status validate(const SamplingParams& params);

// Philox-4x32-10 block for (key = seed, counter = {sample_index, step}); four 32-bit words.
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t sample_index, uint64_t step);
// Uniform float in [0, 1) from the first word of that block (24 high bits).
float uniform01(uint64_t seed, uint64_t sample_index, uint64_t step);

// One candidate after filtering, in descending probability (ties: lower id first).
struct Candidate {
  int32_t id;
  float prob;  // renormalized over the kept set
};

// The kept set, following HF's order: temperature, then top-k, then top-p (keep the
// smallest prefix of the sorted distribution whose mass reaches top_p; always ≥ 1 token).
std::vector<Candidate> candidate_set(std::span<const float> logits, const SamplingParams& params);

// Greedy: the first index of the largest logit (NaN never larger, except at index 0).
int32_t argmax(std::span<const float> logits);

// Draws a token: argmax when temperature == 0, else inverse-CDF over candidate_set with
// uniform01(seed, sample_index, step). Both are pure and safe to call from several threads
// at once (scratch buffers are per thread).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sample_index,
                     uint64_t step);

}  // namespace kernelllm
