// The Backend interface's default forward_argmax: forward(), then the greedy draw of each row on
// the host as generation draws (sample_step.h: rows in parallel when there are several).
#include "kernelllm/engine/backend.h"

#include "engine/sample_step.h"
#include "kernelllm/engine/sampler.h"

namespace kernelllm {

Status Backend::forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  KLLM_RETURN_IF_ERROR(forward(batch, logits));
  const auto vocab = static_cast<size_t>(config().vocab_size);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<TokenDraw> draws(logits.size() / vocab);
  for (size_t r = 0; r < draws.size(); ++r) draws[r] = TokenDraw{{logits.data() + r * vocab, vocab}, &greedy, r, 0};
  draw_tokens(draws);
  tokens.resize(draws.size());
  for (size_t r = 0; r < draws.size(); ++r) tokens[r] = draws[r].token;
  return Status::ok_status();
}

}  // namespace kernelllm
