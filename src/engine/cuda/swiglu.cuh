// The Llama MLP activation: out[t, i] = silu(gate[t, i]) * up[t, i], where gate and up are
// the two halves of the fused gate_up projection's output [T, 2 * inter], in `in_type` (fp32
// from the GEMV, the compute dtype from cuBLASLt); out is in `type`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

void swiglu(DType type, DType in_type, const void* gate_up, int64_t n_tokens, int64_t inter, void* out,
            cudaStream_t stream);

}  // namespace kernelllm::cuda
