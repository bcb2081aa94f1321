// Device sampler timings (engine/cuda/sample.cuh) at Llama-3's vocabulary (128,256): one draw
// and 20 draws (a row each), on flat rows (a random-weight model's logits, std 0.3) and on
// peaked ones (std 2.5 with a few tokens far above), for several sampling settings and blocks per
// draw (the backend's choice named), next to the greedy argmax kernel; each sampled setting by
// the coarse buckets (the default) and by radix selection over the row (kForceRadix). CUDA
// events, median of 50 after 5 warm-up launches.
// Usage: kernelllm_cuda_sample_bench
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "event_timer.h"
#include "engine/cuda/argmax.cuh"
#include "engine/cuda/common.cuh"
#include "engine/cuda/sample.cuh"

using namespace kernelllm;
using namespace kernelllm::cuda;

namespace {

float median_us(const std::function<void()>& fn) {
  return 1e3f * kernelllm::bench::median_event_ms([&](int) { fn(); });
}

}  // namespace

int main() {
  constexpr int64_t kVocab = 128256, kRows = 20;
  int major = 0, sms = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  struct Kind {
    const char* name;
    float stddev;
  };
  const Kind kinds[] = {{"flat", 0.3f}, {"peaked", 2.5f}};
  struct Setting {
    const char* name;
    float temperature, top_p;
    int32_t top_k;
  };
  const Setting settings[] = {{"T0.6 p0.95", 0.6f, 0.95f, 0},
                              {"T1.0 p0.97", 1.0f, 0.97f, 0},
                              {"T0.6 p1", 0.6f, 1.0f, 0},
                              {"T0.6 k50", 0.6f, 1.0f, 50},
                              {"greedy", 0.0f, 1.0f, 0}};
  DeviceBuffer logits, draws, ids;
  (void)logits.allocate(static_cast<size_t>(kRows * kVocab) * 4, "logits");
  (void)draws.allocate(kRows * sizeof(sample_block::Draw), "draws");
  (void)ids.allocate(kRows * 4, "ids");
  std::mt19937_64 rng(7);
  for (const Kind& kind : kinds) {
    std::vector<float> host(static_cast<size_t>(kRows * kVocab));
    std::normal_distribution<float> normal(0.0f, kind.stddev);
    for (float& x : host) x = normal(rng);
    if (kind.stddev > 1.0f) {
      for (int64_t r = 0; r < kRows; ++r) {
        for (int j = 0; j < 5; ++j) {
          host[static_cast<size_t>(r * kVocab) + rng() % kVocab] = 12.0f + static_cast<float>(j);
        }
      }
    }
    cudaMemcpy(logits.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice);
    for (const int64_t n : {int64_t{1}, kRows}) {
      std::printf("%s n=%-2lld argmax kernel", kind.name, static_cast<long long>(n));
      for (const int blocks : {1, 4, 8, 16}) {
        if (blocks > 1 && major < 9) continue;
        std::printf("  %2d blocks %8.1f us", blocks,
                    median_us([&] { argmax_rows(logits.as<float>(), n, kVocab, ids.as<int32_t>(), blocks, nullptr); }));
      }
      std::printf("   (the backend takes %d)\n", cluster_blocks_per_row(major, sms, n));
      for (const Setting& s : settings) {
        for (const uint32_t flags : {0u, sample_block::kForceRadix}) {
          if (flags != 0 && s.temperature == 0.0f) continue;
          std::vector<sample_block::Draw> d;
          for (int64_t r = 0; r < n; ++r) {
            d.push_back(
                sample_block::Draw{r, s.temperature, s.top_p, s.top_k, 11, static_cast<uint64_t>(r), 3, flags});
          }
          cudaMemcpy(draws.get(), d.data(), d.size() * sizeof(d[0]), cudaMemcpyHostToDevice);
          std::printf("%s n=%-2lld %-11s %-7s", kind.name, static_cast<long long>(n), s.name,
                      flags != 0 ? "radix" : "buckets");
          for (const int blocks : {1, 4, 8, 16}) {
            if (blocks > 1 && major < 9) continue;
            std::printf("  %2d blocks %8.1f us", blocks, median_us([&] {
                          sample_rows(logits.as<float>(), kVocab, draws.as<sample_block::Draw>(), n,
                                      ids.as<int32_t>(), blocks, nullptr);
                        }));
          }
          std::printf("   (the backend takes %d)\n", cluster_blocks_per_row(major, sms, n));
        }
      }
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
