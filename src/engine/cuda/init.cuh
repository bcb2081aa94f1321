// Filling device weights: dtype conversion of uploaded tensors and seeded random weights.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// dst[i] = (dst_type) src[i] for n elements; both types among f32, f16, bf16.
void convert(DType dst_type, void* dst, DType src_type, const void* src, int64_t n, cudaStream_t stream);
// Uniform in [-std*sqrt(3), std*sqrt(3)) (standard deviation `std`), from a hash of
// (seed, index): the same values for the same seed on any GPU.
void fill_random(DType type, void* dst, int64_t n, uint64_t seed, float std, cudaStream_t stream);
void fill_value(DType type, void* dst, int64_t n, float value, cudaStream_t stream);

}  // namespace kernelllm::cuda
