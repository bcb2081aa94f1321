// Tokens drawn on the device: one thread block, or one cluster of blocks each taking a share of
// the row, per draw runs sample_block.h's draw_token over its logits row, so the ids are those
// the host gets running the same code (tests/unit/sample_block_host.h), and sample_token's
// except within ~1e-6 of a step of the distribution.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/sample_block.h"

namespace kernelllm::cuda {

// ids[i] = the token of draws[i] (device memory, n_draws of them) from its row of `logits`
// ([rows, vocab], vocab <= sample_block::kMaxVocab), with `blocks_per_draw` blocks per draw
// (1, or 2, 4, 8, 16 from compute capability 9.0; common.cuh's cluster_blocks_per_row is the
// backend's choice). The tokens do not depend on it.
void sample_rows(const float* logits, int64_t vocab, const sample_block::Draw* draws, int64_t n_draws, int32_t* ids,
                 int blocks_per_draw, cudaStream_t stream);

}  // namespace kernelllm::cuda
