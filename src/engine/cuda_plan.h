// The CUDA backend's kernel plan: which kernel serves each projection and the attention of a
// pass, for a model shape, dtype, GPU and batch size. Decided here, in plain C++ (unit-tested
// on any machine: tests/unit/cuda_plan_test.cpp); the backend's run_layers only reads it.
// docs/cuda-engine.md says why each kernel wins where it serves.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/cuda/shapes.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// What the plan needs to know of the GPU.
struct GpuTraits {
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  int64_t smem_per_block = 0;  // the most dynamic shared memory a block may opt into, bytes
};

// The plan's inputs besides the GPU: each a code path a bench program or a test may select (a
// plan text, parse_plan_choices), every default the measured winner. Users have one setting,
// the environment variable KERNELLLM_CUDA_PLAN=portable (plan_choices_from_env).
struct PlanChoices {
  // The plan of a GPU without Hopper's features (TMA, clusters, programmatic dependent launch)
  // and with 99 KB of shared memory per block (Ada, compute capability 8.9): on a Hopper GPU it
  // runs what an A100, L40S or RTX 4090 runs.
  bool portable = false;
  bool gemv = true;              // one token: the GEMV (else cuBLASLt)
  bool skinny = true;            // 2..skinny_tokens tokens: the skinny GEMM (else cuBLASLt)
  int64_t skinny_tokens = 16;    // (1..32) where the 17..32-token kernels take over
  enum class Wide { off, chosen, all };  // a 17..32-token GEMM: off, where it wins, everywhere
  Wide staged = Wide::chosen;    // the staged GEMM (the vocabulary projection)
  Wide band = Wide::chosen;      // the band GEMM (gate_up)
  int band_parts = -1;           // its parts form (qkv, o, down): -1 its cost model's count, 0 off, N parts
  bool lt_tuned = true;          // cuBLASLt's tuned algorithm picks (gemm.cuh)
  bool fused_swiglu = true;      // gate_up's GEMV or band GEMM writes the activation itself
  bool fused_rope = true;        // single-token passes: RoPE and the KV write in the attention
  bool cascade = true;           // forks of one prompt: the cascade (shared-prefix) attention
  bool mma_suffix = true;        // the cascade's own positions on the tensor cores
  bool tma_suffix = true;        // ... their K/V rows by TMA (where the band parts stream qkv)
  bool o_prefetch = true;        // the cascade's prefix kernel asks o's first weights into L2
  bool prefill_head_rows = true; // the head-rows prefill attention where the group is 4
  bool kv_evict_first = true;    // attention's K/V loads under an L2 evict-first policy
  bool weights_evict_first = true;  // every weight stream under an L2 evict-first policy
  bool pdl = true;               // programmatic dependent launch
  bool chain = true;             // decode steps launched one ahead (decode_chain.h)
  bool device_sampling = true;   // sampled draws on the device (sample.cuh)
};

// A plan text: comma-separated items, "portable" or key=value with the keys of PlanChoices
// (booleans 0/1, skinny_tokens 1..32, staged and band off/chosen/all, band_parts auto or 0..8).
// "" and "auto" are the defaults. Unknown keys and bad values are errors that list the keys.
Result<PlanChoices> parse_plan_choices(std::string_view text);
// The canonical text of `choices` (only what differs from the defaults; "auto" when nothing).
std::string plan_text(const PlanChoices& choices);
// KERNELLLM_CUDA_PLAN: unset, "" or "auto": the defaults; "portable": the portable plan.
// Anything else is an error (the other choices are for bench programs: their --cuda-plan).
Result<PlanChoices> plan_choices_from_env();
// A caller's plan text (CudaBackendOptions::plan), or where it is empty the environment's.
Result<PlanChoices> plan_choices(std::string_view text);

// How a projection y = x . W^T is computed.
enum class ProjKernel { cublaslt, gemv, skinny, staged, band, band_parts };
std::string_view proj_kernel_name(ProjKernel kernel);

struct ProjPlan {
  ProjKernel kernel = ProjKernel::cublaslt;
  int parts = 0;        // band_parts: a fixed part count, or 0 for band_parts_for's choice
  bool swiglu = false;  // gate_up only: the kernel writes the SwiGLU activation (gemv, band)
};

enum class AttentionKind {
  split,    // the split-K decode/mixed kernel (attention.cuh)
  prefill,  // the tensor-core prefill kernel over query blocks
  cascade,  // single-token forks sharing a prompt's pages (attention_shared.cuh)
};

// One pass of n tokens.
struct PassPlan {
  ProjPlan qkv, o, gate_up, down, lm_head;
  AttentionKind attention = AttentionKind::split;
  PrefillKernel prefill = PrefillKernel::row_tile;  // with attention prefill
  bool mma_suffix = false;  // cascade: the own positions on the tensor cores, else the split kernel
  bool tma_suffix = false;  // ... their rows by TMA
  bool o_prefetch = false;  // cascade: o's first weights asked into L2 (only where o's parts serve)
  // RoPE and the KV write folded into the split kernel (where its instance folds: the backend
  // asks attention_partial_folds_rope); else rope_write_kv.
  bool fused_rope = false;
  bool kv_evict_first = false;
};

class KernelPlan {
 public:
  KernelPlan(const ModelConfig& config, DType dtype, const GpuTraits& gpu, const PlanChoices& choices);

  const PlanChoices& choices() const { return choices_; }
  // TMA, clusters and programmatic dependent launch in use: compute capability 9.0+ with the
  // shared memory per block the band GEMM asks (kBandSmemBytes), not portable.
  bool hopper() const { return hopper_; }
  // The compute capability the kernels' own choices see (cluster sizes): 8 in the portable plan.
  int feature_major() const { return hopper_ ? gpu_.major : std::min(gpu_.major, 8); }
  bool pdl() const { return hopper_ && choices_.pdl; }
  bool weights_evict_first() const { return choices_.weights_evict_first; }
  bool lt_tuned() const { return hopper_ && gpu_.major == 9 && choices_.lt_tuned; }
  bool chain() const { return choices_.chain; }
  bool device_sampling() const { return choices_.device_sampling; }
  // Whether some pass may use the staged GEMM / the band GEMM's parts form (their scratch).
  bool staged_possible() const;
  bool band_parts_possible() const;
  // Whether forks of one prompt go through the cascade attention (given a pass of >= 2 tokens).
  bool cascade_possible() const;

  // The kernel for a [rows, cols] projection of n tokens outside a layer (the vocabulary's).
  ProjPlan projection(int64_t rows, int64_t cols, int64_t n) const;
  // A pass of n tokens: with q_blocks > 0 a prefill-style pass over that many query blocks;
  // single_token: one new token per sequence; cascade: the forks share pages (plan_shared_pass).
  PassPlan pass(int64_t n, int64_t q_blocks, bool single_token, bool cascade) const;

  // "qkv skinny, o skinny, gate_up skinny, down skinny, lm_head skinny, attention split" for a
  // single-token pass of n tokens (cascade where forks share a prompt): what bench records.
  std::string describe(int64_t n, bool cascade) const;

 private:
  enum class Layer { qkv, o, gate_up, down };
  ProjPlan layer_proj(Layer which, int64_t rows, int64_t cols, int64_t n) const;
  bool staged_serves(int64_t rows, int64_t cols, int64_t n) const;
  bool band_serves(int64_t rows, int64_t cols, int64_t n) const;

  DType dtype_;
  GpuTraits gpu_;
  PlanChoices choices_;
  bool hopper_;
  int64_t hidden_, inter_, vocab_, q_dim_, kv_dim_, head_dim_, group_;
  int64_t smem_per_block_;
};

}  // namespace kernelllm::cuda
