// The Llama MLP activation: out[t, i] = silu(gate[t, i]) * up[t, i], where gate and up are
// the two halves of the fused gate_up projection's fp32 output [T, 2 * inter].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

void swiglu(DType type, const float* gate_up, int64_t n_tokens, int64_t inter, void* out, cudaStream_t stream);

}  // namespace kernelllm::cuda
