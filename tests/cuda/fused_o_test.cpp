// The o projection's attention form (band_gemm_parts_attention: the cascade's prefix units and
// merge in o's grid) against the separate kernels it replaces: a random model with the 8B layer
// shapes (2 layers, a small vocabulary), a 300-token prompt forked to k sequences that decode
// together; every logit of every step must be the same bits either way (the same kernels' code,
// the same slots, the same merge order), at k = 20 and 32 (3 and 4 token tiles).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda/band_gemm.cuh"
#include "kernelllm/engine/bench.h"
#include "kernelllm/engine/cuda_backend.h"

namespace kernelllm {
namespace {

ModelConfig two_layer_8b() {
  auto json = named_config_json("llama-3.1-8b");
  EXPECT_TRUE(json.ok());
  auto config = ModelConfig::from_json(*json);
  EXPECT_TRUE(config.ok());
  ModelConfig c = *config;
  c.num_hidden_layers = 2;
  c.vocab_size = 4096;
  return c;
}

// Logits of a prompt forked to k sequences, then `steps` decode steps of all k together;
// KERNELLLM_CUDA_FUSED_O = mode (0: the separate kernels, 1: the attention form, 2: the same with
// o's first weights asked for before its wait).
std::vector<float> fork_logits(const ModelConfig& c, int mode, int k, int steps) {
  setenv("KERNELLLM_CUDA_FUSED_O", std::to_string(mode).c_str(), 1);
  CudaBackendOptions o;
  o.dtype = DType::bf16;
  o.kv_capacity_tokens = 16384;
  auto b = make_cuda_backend_random(c, 11, o);
  unsetenv("KERNELLLM_CUDA_FUSED_O");  // read when the backend is made
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  if (!b.ok()) return {};
  Backend& be = **b;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back((i * 2741 + 17) % static_cast<int32_t>(c.vocab_size));
  const SeqId root = *be.create_sequence();
  std::vector<float> out, all;
  const ForwardRequest pre{root, prompt, false};
  EXPECT_TRUE(be.forward({&pre, 1}, out).ok());
  std::vector<SeqId> seqs = {root};
  for (int f = 1; f < k; ++f) seqs.push_back(*be.fork_sequence(root));
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> toks(static_cast<size_t>(k));
    std::vector<ForwardRequest> req;
    for (int f = 0; f < k; ++f) toks[static_cast<size_t>(f)] = (step * 389 + f * 1031 + 5) % 4096;
    for (int f = 0; f < k; ++f) req.push_back({seqs[static_cast<size_t>(f)], {&toks[static_cast<size_t>(f)], 1}, false});
    const Status st = be.forward(req, out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

TEST(FusedOProjection, ServesTheEightBShapeAtTwentyAndThirtyTwo) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (int64_t n : {20, 32}) {
    cuda::AttentionArgs a;
    a.n_tokens = n;
    a.heads = 32;
    a.kv_heads = 8;
    a.head_dim = 128;
    const int parts = cuda::band_parts_for(cuda::BandConfig{}, 4096, 4096, n, sms);
    EXPECT_TRUE(cuda::band_attention_serves(cuda::BandConfig{}, DType::bf16, a, 4096, 4096, parts, sms)) << n;
    a.n_tokens = 16;  // the skinny GEMM's
    EXPECT_FALSE(cuda::band_attention_serves(cuda::BandConfig{}, DType::bf16, a, 4096, 4096, parts, sms));
    a.n_tokens = n;
    a.head_dim = 64;  // the prefix units' instance is head_dim 128 only
    EXPECT_FALSE(cuda::band_attention_serves(cuda::BandConfig{}, DType::bf16, a, 4096, 2048, parts, sms));
  }
}

TEST(FusedOProjection, SameLogitsAsTheSeparateKernels) {
  const ModelConfig c = two_layer_8b();
  for (int k : {20, 32}) {
    const std::vector<float> plain = fork_logits(c, 0, k, 3);
    ASSERT_EQ(plain.size(), static_cast<size_t>(3 * k * c.vocab_size));
    bool finite = true;
    for (float v : plain) finite = finite && std::isfinite(v);
    EXPECT_TRUE(finite) << "k = " << k;
    for (int mode : {1, 2}) {
      const std::vector<float> fused = fork_logits(c, mode, k, 3);
      ASSERT_EQ(fused.size(), plain.size());
      size_t differ = 0;
      for (size_t i = 0; i < fused.size(); ++i) differ += std::memcmp(&fused[i], &plain[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "k = " << k << ", mode " << mode;
    }
  }
}

}  // namespace
}  // namespace kernelllm
