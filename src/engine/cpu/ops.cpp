// CPU kernels; see ops.h. Plain loops written so the compiler can vectorize them; the
// reference is about being right and readable, the CUDA backend is about speed.
#include "engine/cpu/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace kernelllm::cpu {

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {
template <class Convert>
void convert_u16(const std::byte* src, int64_t n, float* out, Convert conv) {
  // Copy the (possibly unaligned) row into aligned 16-bit words in chunks, then widen: both
  // loops vectorize.
  constexpr int64_t kChunk = 256;
  uint16_t bits[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    std::memcpy(bits, src + 2 * i0, static_cast<size_t>(m) * 2);
    for (int64_t i = 0; i < m; ++i) out[i0 + i] = conv(bits[i]);
  }
}

void convert(const std::byte* src, DType dtype, int64_t n, float* out) {
  switch (dtype) {
    case DType::bf16:
      convert_u16(src, n, out, [](uint16_t b) { return bf16_to_float(b); });
      break;
    case DType::f16:
      convert_u16(src, n, out, [](uint16_t b) { return f16_to_float(b); });
      break;
    default:
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
      break;
  }
}

// Eight independent partial sums, combined pairwise: a fixed order the compiler vectorizes.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
}  // namespace

void load_row(const WeightMatrix& w, int64_t r, float* out) {
  convert(w.data + static_cast<size_t>(r * w.cols) * dtype_size(w.dtype), w.dtype, w.cols, out);
}

std::vector<float> to_float_vector(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert(t.data.data(), t.dtype, t.numel(), out.data());
  return out;
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const int64_t rows = w.rows, cols = w.cols;
  pool.parallel_for(
      rows,
      [&](int64_t r_begin, int64_t r_end) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
          const int64_t t1 = std::min(n_tokens, t0 + kTokenBlock);
          for (int64_t r = r_begin; r < r_end; ++r) {
            const float* wr = row.data();
            if (w.dtype == DType::f32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0) {
              wr = reinterpret_cast<const float*>(w.data) + r * cols;
            } else {
              load_row(w, r, row.data());
            }
            for (int64_t t = t0; t < t1; ++t) y[t * rows + r] = dot(wr, x + t * cols, cols);
          }
        }
      },
      /*min_chunk=*/16);
}

void rms_norm(const float* x, const float* weight, int64_t n, double eps, float* out) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float variance = sum_sq / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(variance + static_cast<float>(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void rope_cos_sin(std::span<const float> inv_freq, int64_t pos, float* cos_out, float* sin_out) {
  const auto p = static_cast<float>(pos);
  for (size_t j = 0; j < inv_freq.size(); ++j) {
    const float angle = p * inv_freq[j];
    cos_out[j] = std::cos(angle);
    sin_out[j] = std::sin(angle);
  }
}

void rope_apply(float* x, const float* cos_v, const float* sin_v, int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    x[j] = a * cos_v[j] - b * sin_v[j];
    x[j + half] = b * cos_v[j] + a * sin_v[j];
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    total += x[i];
  }
  const float inv = 1.0f / total;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace kernelllm::cpu
