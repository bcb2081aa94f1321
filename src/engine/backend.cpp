// The Backend interface's default forward_argmax: forward(), then argmax per row on the host.
#include "kernelllm/engine/backend.h"

#include "kernelllm/engine/sampler.h"

namespace kernelllm {

Status Backend::forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens) {
  std::vector<float> logits;
  KLLM_RETURN_IF_ERROR(forward(batch, logits));
  const auto vocab = static_cast<size_t>(config().vocab_size);
  tokens.resize(logits.size() / vocab);
  for (size_t r = 0; r < tokens.size(); ++r) tokens[r] = argmax({logits.data() + r * vocab, vocab});
  return Status::ok_status();
}

}  // namespace kernelllm
