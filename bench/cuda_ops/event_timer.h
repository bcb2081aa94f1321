// The device benches' timer: CUDA events around each launch on the default stream, median of
// `reps` after `warmup` untimed calls. fn(i) gets the call's index (for rotating inputs).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace kernelllm::bench {

inline float median_event_ms(const std::function<void(int)>& fn, int warmup = 5, int reps = 50) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn(i);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    ts.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace kernelllm::bench
