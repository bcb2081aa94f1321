// The CUDA kernel plan (engine/cuda_plan.h), decided on the CPU: which kernel serves each of
// Llama-3.1-8B's projections and the attention at the batch sizes of k-sample decoding, on an
// H100, an A100 and an RTX 4090 (and the H100 forced to the portable plan); the plan text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/cuda_plan.h"
#include "kernelllm/engine/random_weights.h"

namespace kernelllm::cuda {
namespace {

// KernelLLM's own config (the built-in "llama-3.1-8b" shape of random_weights.h).
ModelConfig llama_8b() {
  auto json = named_config_json("llama-3.1-8b");
  EXPECT_TRUE(json.ok());
  auto c = ModelConfig::from_json(json.ok() ? *json : "{}");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

// Compute capability, SMs and opt-in shared memory per block of each GPU.
const GpuTraits kH100{9, 0, 132, 227 * 1024};
const GpuTraits kA100{8, 0, 108, 163 * 1024};
const GpuTraits kRtx4090{8, 9, 128, 99 * 1024};

KernelPlan plan_for(const GpuTraits& gpu, const std::string& text = "", DType dtype = DType::bf16) {
  auto choices = parse_plan_choices(text);
  EXPECT_TRUE(choices.ok()) << choices.status().to_string();
  return KernelPlan(llama_8b(), dtype, gpu, choices.ok() ? *choices : PlanChoices{});
}

TEST(CudaPlan, HopperDecodeByBatchSize) {
  const KernelPlan plan = plan_for(kH100);
  EXPECT_TRUE(plan.hopper());
  EXPECT_TRUE(plan.pdl());
  EXPECT_TRUE(plan.lt_tuned());
  // One sequence: the GEMV everywhere, gate_up writing the SwiGLU activation, RoPE folded.
  PassPlan p = plan.pass(1, 0, true, false);
  EXPECT_EQ(p.qkv.kernel, ProjKernel::gemv);
  EXPECT_EQ(p.o.kernel, ProjKernel::gemv);
  EXPECT_EQ(p.gate_up.kernel, ProjKernel::gemv);
  EXPECT_TRUE(p.gate_up.swiglu);
  EXPECT_EQ(p.down.kernel, ProjKernel::gemv);
  EXPECT_EQ(p.lm_head.kernel, ProjKernel::gemv);
  EXPECT_EQ(p.attention, AttentionKind::split);
  EXPECT_TRUE(p.fused_rope);
  // 10 forks: the skinny GEMM; the cascade with its own positions on the tensor cores (no fold).
  p = plan.pass(10, 0, true, true);
  for (const ProjPlan* q : {&p.qkv, &p.o, &p.gate_up, &p.down, &p.lm_head}) EXPECT_EQ(q->kernel, ProjKernel::skinny);
  EXPECT_FALSE(p.gate_up.swiglu);
  EXPECT_EQ(p.attention, AttentionKind::cascade);
  EXPECT_TRUE(p.mma_suffix);
  EXPECT_FALSE(p.tma_suffix);
  EXPECT_FALSE(p.fused_rope);
  // 20 forks: band parts for qkv, o, down; the band GEMM + SwiGLU for gate_up; the staged GEMM
  // for the vocabulary; the own positions' rows by TMA; o's weights asked into L2.
  p = plan.pass(20, 0, true, true);
  EXPECT_EQ(p.qkv.kernel, ProjKernel::band_parts);
  EXPECT_EQ(p.qkv.parts, 0);  // band_parts_for's count
  EXPECT_EQ(p.o.kernel, ProjKernel::band_parts);
  EXPECT_EQ(p.down.kernel, ProjKernel::band_parts);
  EXPECT_EQ(p.gate_up.kernel, ProjKernel::band);
  EXPECT_TRUE(p.gate_up.swiglu);
  EXPECT_EQ(p.lm_head.kernel, ProjKernel::staged);
  EXPECT_TRUE(p.tma_suffix);
  EXPECT_TRUE(p.o_prefetch);
  // Past 32 tokens (a prefill chunk): cuBLASLt, the head-rows prefill attention.
  p = plan.pass(1500, 47, false, false);
  for (const ProjPlan* q : {&p.qkv, &p.o, &p.gate_up, &p.down, &p.lm_head}) EXPECT_EQ(q->kernel, ProjKernel::cublaslt);
  EXPECT_EQ(p.attention, AttentionKind::prefill);
  EXPECT_EQ(p.prefill, PrefillKernel::head_rows);
  EXPECT_FALSE(p.fused_rope);
}

TEST(CudaPlan, AmpereAndAdaUseNoHopperFeature) {
  for (const GpuTraits& gpu : {kA100, kRtx4090}) {
    const KernelPlan plan = plan_for(gpu);
    SCOPED_TRACE(std::to_string(gpu.major) + "." + std::to_string(gpu.minor));
    EXPECT_FALSE(plan.hopper());
    EXPECT_FALSE(plan.pdl());
    EXPECT_FALSE(plan.lt_tuned());
    EXPECT_FALSE(plan.staged_possible());
    EXPECT_FALSE(plan.band_parts_possible());
    EXPECT_EQ(plan.feature_major(), 8);  // no clusters for the sampler and argmax
    for (int64_t n : {1, 2, 10, 16, 17, 20, 32, 64}) {
      const PassPlan p = plan.pass(n, 0, true, n >= 2);
      for (const ProjPlan* q : {&p.qkv, &p.o, &p.gate_up, &p.down, &p.lm_head}) {
        EXPECT_NE(q->kernel, ProjKernel::staged) << n;
        EXPECT_NE(q->kernel, ProjKernel::band) << n;
        EXPECT_NE(q->kernel, ProjKernel::band_parts) << n;
      }
      EXPECT_FALSE(p.tma_suffix) << n;
      EXPECT_EQ(p.qkv.kernel, n == 1 ? ProjKernel::gemv : n <= 16 ? ProjKernel::skinny : ProjKernel::cublaslt) << n;
    }
    // The cascade attention (mma.sync, cp.async) runs from compute capability 8.0.
    EXPECT_EQ(plan.pass(20, 0, true, true).attention, AttentionKind::cascade);
  }
  // A newer GPU without Hopper's shared memory per block (here 99 KB) gets
  // the portable plan's kernels, not the band or staged GEMM.
  const KernelPlan small_smem = plan_for(GpuTraits{12, 0, 170, 99 * 1024});
  EXPECT_FALSE(small_smem.hopper());
  EXPECT_EQ(small_smem.pass(20, 0, true, true).gate_up.kernel, ProjKernel::cublaslt);
  EXPECT_TRUE(plan_for(GpuTraits{10, 0, 148, 227 * 1024}).hopper());
  // Head rows take 104,448 bytes of shared memory at head_dim 128: an A100 has room, a 4090 not.
  EXPECT_EQ(plan_for(kA100).pass(1500, 47, false, false).prefill, PrefillKernel::head_rows);
  const PassPlan ada = plan_for(kRtx4090).pass(1500, 47, false, false);
  EXPECT_EQ(ada.attention, AttentionKind::prefill);
  EXPECT_EQ(ada.prefill, PrefillKernel::row_tiles2);
}

TEST(CudaPlan, PortableOnHopperIsTheAdaPlan) {
  const KernelPlan portable = plan_for(kH100, "portable");
  const KernelPlan ada = plan_for(kRtx4090);
  EXPECT_FALSE(portable.hopper());
  EXPECT_FALSE(portable.pdl());
  for (int64_t n : {1, 2, 10, 20, 32}) {
    EXPECT_EQ(portable.describe(n, n >= 2), ada.describe(n, n >= 2)) << n;
  }
  EXPECT_EQ(portable.pass(1500, 47, false, false).prefill, PrefillKernel::row_tiles2);
}

TEST(CudaPlan, ChoicesSelectCodePaths) {
  // Everything a bench program A/B-tests: each choice moves the kernel it names.
  EXPECT_EQ(plan_for(kH100, "gemv=0").pass(1, 0, true, false).qkv.kernel, ProjKernel::cublaslt);
  EXPECT_EQ(plan_for(kH100, "skinny=0").pass(10, 0, true, true).o.kernel, ProjKernel::cublaslt);
  EXPECT_EQ(plan_for(kH100, "skinny_tokens=8").pass(10, 0, true, true).gate_up.kernel, ProjKernel::band);
  EXPECT_EQ(plan_for(kH100, "staged=off").pass(20, 0, true, true).lm_head.kernel, ProjKernel::band);
  EXPECT_EQ(plan_for(kH100, "staged=off,band=off").pass(20, 0, true, true).lm_head.kernel, ProjKernel::cublaslt);
  EXPECT_EQ(plan_for(kH100, "staged=all").pass(20, 0, true, true).o.kernel, ProjKernel::staged);
  EXPECT_EQ(plan_for(kH100, "band=all").pass(20, 0, true, true).o.kernel, ProjKernel::band);
  const PassPlan no_parts = plan_for(kH100, "band_parts=0").pass(20, 0, true, true);
  EXPECT_EQ(no_parts.qkv.kernel, ProjKernel::cublaslt);
  EXPECT_FALSE(no_parts.tma_suffix);
  EXPECT_FALSE(no_parts.o_prefetch);
  EXPECT_EQ(plan_for(kH100, "band_parts=4").pass(20, 0, true, true).down.parts, 4);
  EXPECT_FALSE(plan_for(kH100, "fused_swiglu=0").pass(1, 0, true, false).gate_up.swiglu);
  EXPECT_FALSE(plan_for(kH100, "fused_rope=0").pass(1, 0, true, false).fused_rope);
  EXPECT_EQ(plan_for(kH100, "cascade=0").pass(20, 0, true, true).attention, AttentionKind::split);
  EXPECT_FALSE(plan_for(kH100, "mma_suffix=0").pass(20, 0, true, true).mma_suffix);
  EXPECT_FALSE(plan_for(kH100, "tma_suffix=0").pass(20, 0, true, true).tma_suffix);
  EXPECT_FALSE(plan_for(kH100, "o_prefetch=0").pass(20, 0, true, true).o_prefetch);
  EXPECT_EQ(plan_for(kH100, "prefill_head_rows=0").pass(64, 2, false, false).prefill, PrefillKernel::row_tiles2);
  EXPECT_FALSE(plan_for(kH100, "kv_evict_first=0").pass(20, 0, true, true).kv_evict_first);
  EXPECT_FALSE(plan_for(kH100, "pdl=0").pdl());
  EXPECT_FALSE(plan_for(kH100, "lt_tuned=0").lt_tuned());
  EXPECT_FALSE(plan_for(kH100, "chain=0").chain());
  EXPECT_FALSE(plan_for(kH100, "device_sampling=0").device_sampling());
  EXPECT_FALSE(plan_for(kH100, "weights_evict_first=0").weights_evict_first());
}

TEST(CudaPlan, DtypeAndShapeLimits) {
  // f32 weights (the parity path): no tensor-core kernel, no cascade; the GEMV still serves one token.
  const KernelPlan f32 = plan_for(kH100, "", DType::f32);
  PassPlan p = f32.pass(10, 0, true, true);
  for (const ProjPlan* q : {&p.qkv, &p.o, &p.gate_up, &p.down, &p.lm_head}) EXPECT_EQ(q->kernel, ProjKernel::cublaslt);
  EXPECT_EQ(p.attention, AttentionKind::split);
  EXPECT_EQ(f32.pass(1, 0, true, false).qkv.kernel, ProjKernel::gemv);
  EXPECT_EQ(f32.pass(64, 2, false, false).attention, AttentionKind::split);
  // A single-token pass never takes the prefill kernel.
  EXPECT_NE(plan_for(kH100).pass(20, 0, true, false).attention, AttentionKind::prefill);
}

TEST(CudaPlan, PlanText) {
  EXPECT_EQ(plan_text(PlanChoices{}), "auto");
  auto c = parse_plan_choices(" portable , band_parts=4,staged=all, chain=0 ");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->portable);
  EXPECT_EQ(c->band_parts, 4);
  EXPECT_EQ(c->staged, PlanChoices::Wide::all);
  EXPECT_FALSE(c->chain);
  EXPECT_EQ(plan_text(*c), "portable,staged=all,band_parts=4,chain=0");
  auto again = parse_plan_choices(plan_text(*c));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(plan_text(*again), plan_text(*c));
  EXPECT_TRUE(parse_plan_choices("auto").ok());
  EXPECT_TRUE(parse_plan_choices("").ok());

  auto unknown = parse_plan_choices("band_partz=2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown item 'band_partz=2'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("band_parts=auto or 0..8"), std::string::npos);
  auto bad = parse_plan_choices("skinny_tokens=33");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("skinny_tokens expects 1..32, found '33'"), std::string::npos);
  EXPECT_FALSE(parse_plan_choices("chain").ok());
  EXPECT_FALSE(parse_plan_choices("chain=yes").ok());
  EXPECT_FALSE(parse_plan_choices("staged=sometimes").ok());
}

TEST(CudaPlan, EnvironmentTakesOnlyAutoOrPortable) {
  ::unsetenv("KERNELLLM_CUDA_PLAN");
  EXPECT_FALSE(plan_choices_from_env()->portable);
  ::setenv("KERNELLLM_CUDA_PLAN", "portable", 1);
  EXPECT_TRUE(plan_choices_from_env()->portable);
  ::setenv("KERNELLLM_CUDA_PLAN", "auto", 1);
  EXPECT_FALSE(plan_choices_from_env()->portable);
  ::setenv("KERNELLLM_CUDA_PLAN", "chain=0", 1);
  auto r = plan_choices_from_env();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected auto or portable"), std::string::npos);
  ::unsetenv("KERNELLLM_CUDA_PLAN");
}

}  // namespace
}  // namespace kernelllm::cuda
