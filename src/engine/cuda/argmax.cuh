// Greedy token per logits row on the device, as sampler.h's argmax: the first index of the
// largest logit, NaNs never larger, except that a NaN at index 0 wins.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kernelllm::cuda {

// ids[r] = argmax(logits[r * vocab, (r + 1) * vocab)) for r < rows, with `blocks_per_row` blocks
// per row (1, or 2, 4, 8, 16 from compute capability 9.0: a cluster; common.cuh's
// cluster_blocks_per_row is the backend's choice). The ids do not depend on it.
void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, int blocks_per_row,
                 cudaStream_t stream);

}  // namespace kernelllm::cuda
