// Tokens drawn on the device: one thread block per draw runs sample_block.h's draw_token over
// its logits row, so the ids are those the host gets running the same code (tests/unit/
// sample_block_host.h), and sample_token's except within ~1e-6 of a step of the distribution.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/sample_block.h"

namespace kernelllm::cuda {

// ids[i] = the token of draws[i] (device memory, n_draws of them) from its row of `logits`
// ([rows, vocab], vocab <= sample_block::kMaxVocab).
void sample_rows(const float* logits, int64_t vocab, const sample_block::Draw* draws, int64_t n_draws, int32_t* ids,
                 cudaStream_t stream);

}  // namespace kernelllm::cuda
