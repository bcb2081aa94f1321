// The shapes each CUDA kernel takes, as plain C++ (no CUDA headers): the kernel plan
// (engine/cuda_plan.h) decides from them on any machine, and the kernels' own launchers check
// their arguments with the same functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

inline constexpr int64_t kGemvMaxTokens = 8;
inline constexpr int64_t kSkinnyMaxTokens = 32;
inline constexpr int64_t kStagedMaxTokens = 32;
inline constexpr int64_t kStagedBandRows = 128;  // rows per band: 8 warps x 16
inline constexpr int64_t kStagedStageCols = 128;  // StagedConfig's default columns per stage
inline constexpr int64_t kBandMaxTokens = 32;
// The band GEMM's dynamic shared memory (its ring and 1,024 bytes of alignment): the most any
// kernel asks. Hopper has 227 KB per block; the kernel plan's Hopper paths need a GPU that has it.
inline constexpr int64_t kBandSmemBytes = 220 * 1024 + 1024;
inline constexpr int64_t kPrefillQueryBlock = 32;  // tokens per query block of the prefill kernel
inline constexpr int64_t kSuffixMaxGroup = 4;      // query heads per KV head of suffix_attention_mma

inline bool half_type(DType t) { return t == DType::bf16 || t == DType::f16; }

// The GEMV (gemv.cuh): 1..kGemvMaxTokens tokens, rows of whole 16-byte chunks.
inline bool gemv_supported(DType type, int64_t cols, int64_t n_tokens) {
  const auto vec = static_cast<int64_t>(16 / dtype_size(type));
  return n_tokens >= 1 && n_tokens <= kGemvMaxTokens && cols % vec == 0 && cols % 8 == 0;
}

// The skinny tensor-core GEMM (skinny_gemm.cuh): f16/bf16, cols a multiple of 8.
inline bool skinny_supported(DType type, int64_t cols, int64_t n_tokens) {
  return half_type(type) && cols > 0 && cols % 8 == 0 && n_tokens >= 1 && n_tokens <= kSkinnyMaxTokens;
}

// The staged GEMM (staged_gemm.cuh; TMA, compute capability 9.0+): as the skinny one.
inline bool staged_supported(DType type, int64_t cols, int64_t n_tokens) {
  return half_type(type) && cols > 0 && cols % 8 == 0 && n_tokens >= 1 && n_tokens <= kStagedMaxTokens;
}

// The (band, stage) units each of `blocks` blocks of the staged GEMM takes for a rows x cols
// matrix. The kernel beats cuBLASLt only where this is large (measured on the H100: the
// vocabulary projection, ~240 units per block, streams at 2.83 TB/s at 20 tokens against
// cuBLASLt's 2.69; gate_up, ~54 units, 2.47 against 2.49; down, ~27, 2.03 against 2.17): a
// block's start-up and its shared bands' hand-over are paid per kernel.
inline int64_t staged_units_per_block(int64_t rows, int64_t cols, int64_t blocks) {
  const int64_t units = (rows + kStagedBandRows - 1) / kStagedBandRows * ((cols + kStagedStageCols - 1) / kStagedStageCols);
  return units / (blocks > 1 ? blocks : 1);
}

// The band GEMM (band_gemm.cuh; TMA and clusters, compute capability 9.0+): as the skinny one.
inline bool band_supported(DType type, int64_t cols, int64_t n_tokens) {
  return half_type(type) && cols > 0 && cols % 8 == 0 && n_tokens >= 1 && n_tokens <= kBandMaxTokens;
}

inline bool attention_head_dim_supported(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// The tensor-core prefill attention (attention.cuh).
inline bool prefill_attention_supported(DType type, int64_t head_dim, int64_t group) {
  return half_type(type) && attention_head_dim_supported(head_dim) && group >= 1 && group <= 8;
}

// Its forms: a 16-row query tile per warp, two of them, or the head-rows form (a warp per query
// head over both tiles, groups of 1, 2, 4 or 8).
enum class PrefillKernel { row_tile, row_tiles2, head_rows };

constexpr bool prefill_kernel_serves(PrefillKernel kernel, int64_t group) {
  switch (kernel) {
    case PrefillKernel::row_tiles2: return group <= 4;  // at most 8 warps per block
    case PrefillKernel::head_rows: return group == 1 || group == 2 || group == 4 || group == 8;
    default: return true;
  }
}

// Dynamic shared memory of a prefill form: {K, V} x 2 buffers of 64 positions, then the
// head-rows form's queries, rows padded by 8 elements of 2 bytes. (8B, head rows: 104,448 bytes:
// more than the 99 KB a block may have on compute capability 8.6 and 8.9.)
constexpr size_t prefill_smem_bytes(PrefillKernel kernel, int64_t head_dim, int64_t group) {
  const int64_t q_rows = kernel == PrefillKernel::head_rows ? group * kPrefillQueryBlock : 0;
  return static_cast<size_t>((2 * 2 * 64 + q_rows) * (head_dim + 8) * 2);
}

// The cascade attention's prefix kernel (attention_shared.cuh).
inline bool shared_prefix_supported(DType type, int64_t head_dim, int64_t group) {
  return half_type(type) && attention_head_dim_supported(head_dim) && group >= 1 && group <= 8;
}

// The cascade's own positions on the tensor cores (suffix_attention_mma).
inline bool suffix_mma_supported(DType type, int64_t head_dim, int64_t group) {
  return half_type(type) && (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kSuffixMaxGroup;
}

}  // namespace kernelllm::cuda
