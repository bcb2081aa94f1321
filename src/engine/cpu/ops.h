// The CPU backend's kernels: fp32 math over f32/f16/bf16 weights read in place (each weight
// row is converted while it is used, never copied whole), RMSNorm, RoPE (HF rotate_half
// layout with llama3 frequency scaling), SiLU-gated MLP activation and softmax.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernelllm/base/thread_pool.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cpu {

float bf16_to_float(uint16_t bits);
float f16_to_float(uint16_t bits);

// A row-major [rows, cols] weight in its stored dtype (f32, f16 or bf16).
struct WeightMatrix {
  const std::byte* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Converts row `r` of `w` (cols elements) into `out`.
void load_row(const WeightMatrix& w, int64_t r, float* out);
// Converts a whole 1-D float tensor (norm weights: a few KB).
std::vector<float> to_float_vector(const TensorView& t);

// y[t, r] = sum_c w[r, c] * x[t, c] for t < n_tokens; x is [n_tokens, w.cols], y is
// [n_tokens, w.rows]. Parallel over rows; tokens go in blocks of kTokenBlock so each weight row
// is read from memory once per block (decode: once; prefill of T tokens: T / kTokenBlock
// times). Each dot product is summed in the same order whatever the batch, so a token's
// result does not depend on which other tokens share the call.
inline constexpr int64_t kTokenBlock = 16;
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// HF LlamaRMSNorm in fp32: x / sqrt(mean(x^2) + eps) * weight.
void rms_norm(const float* x, const float* weight, int64_t n, double eps, float* out);

// cos/sin [head_dim / 2] for one position: angle = float(pos) * inv_freq in float32.
void rope_cos_sin(std::span<const float> inv_freq, int64_t pos, float* cos_out, float* sin_out);
// Rotates one head in place: x[j], x[j + half] form a pair (HF rotate_half).
void rope_apply(float* x, const float* cos_v, const float* sin_v, int64_t half);

// out[i] = silu(gate[i]) * up[i].
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// In-place softmax over n scores (max-subtracted, fp32 like HF eager attention).
void softmax(float* x, int64_t n);

}  // namespace kernelllm::cpu
