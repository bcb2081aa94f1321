// The Backend interface's defaults: forward_sample runs forward(), then the draws on the host
// (sample_step.h: rows in parallel when there are several); forward_argmax is forward_sample
// with one greedy draw per row.
#include "kernelllm/engine/backend.h"

#include "engine/sample_step.h"
#include "kernelllm/engine/sampler.h"

#include <string>

namespace kernelllm {

Status Backend::forward_argmax(std::span<const ForwardRequest> batch, std::vector<int32_t>& tokens) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<RowDraw> draws(static_cast<size_t>(output_rows(batch)));
  for (size_t r = 0; r < draws.size(); ++r) draws[r] = RowDraw{static_cast<int64_t>(r), greedy, r, 0};
  return forward_sample(batch, draws, tokens);
}

int64_t output_rows(std::span<const ForwardRequest> batch) {
  int64_t rows = 0;
  for (const ForwardRequest& r : batch) rows += r.all_logits ? static_cast<int64_t>(r.tokens.size()) : 1;
  return rows;
}

Status validate_draws(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws) {
  const int64_t rows = output_rows(batch);
  for (size_t i = 0; i < draws.size(); ++i) {
    const std::string where = "forward_sample: draw " + std::to_string(i) + ": ";
    if (draws[i].row < 0 || draws[i].row >= rows) {
      return error(ErrorCode::invalid_argument, where + "expected a row in [0, " + std::to_string(rows) +
                                                    "), found " + std::to_string(draws[i].row));
    }
    if (Status s = validate(draws[i].params); !s.ok()) return s.with_context(where.substr(0, where.size() - 2));
  }
  return Status::ok_status();
}

Status Backend::forward_sample(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws,
                               std::vector<int32_t>& tokens) {
  KLLM_RETURN_IF_ERROR(validate_draws(batch, draws));
  std::vector<float> logits;
  KLLM_RETURN_IF_ERROR(forward(batch, logits));
  const auto vocab = static_cast<size_t>(config().vocab_size);
  std::vector<TokenDraw> host(draws.size());
  for (size_t i = 0; i < draws.size(); ++i) {
    const RowDraw& d = draws[i];
    host[i] = TokenDraw{{logits.data() + static_cast<size_t>(d.row) * vocab, vocab}, &d.params, d.index, d.step};
  }
  draw_tokens(host);
  tokens.resize(draws.size());
  for (size_t i = 0; i < draws.size(); ++i) tokens[i] = host[i].token;
  return Status::ok_status();
}

}  // namespace kernelllm
