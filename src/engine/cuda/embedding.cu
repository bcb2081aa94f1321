// Embedding lookup; see embedding.cuh.
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/embedding.cuh"

namespace kernelllm::cuda {
namespace {
// Each thread loads 8 elements of the row before it stores any: loads and stores one at a time
// made every store wait for its load, a memory round trip per 256 elements (ncu: 8.7 us for one
// 4,096-wide row).
template <class T>
__global__ void embedding_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids, int64_t hidden,
                                 float* __restrict__ out) {
  constexpr int kInFlight = 8;
  wait_for_predecessor();
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(ids[t]) * hidden;
  float* dst = out + t * hidden;
  for (int64_t i0 = threadIdx.x; i0 < hidden; i0 += kInFlight * blockDim.x) {
    float v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = i0 + j * blockDim.x;
      v[j] = i < hidden ? to_f32(row[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = i0 + j * blockDim.x;
      if (i < hidden) dst[i] = v[j];
    }
  }
}

// One block of 512 threads. The host reads are PCIe round trips, so each thread issues its loads
// (up to 4 metadata items, a page-table patch, an id to publish) before it stores anything. The
// host wrote its metadata and patches before the launch, so their first round is read before
// the wait, while the step before's argmax or sampler still runs (that kernel lets this one
// launch early; k = 20: 6.256-6.261 ms a step against 6.257-6.264 reading after the wait, at
// 13727af); the step before's draws (drawn, publish_from) only after it.
// It does not let the next kernel launch early: the pass's kernels read its metadata and page
// tables before their own waits (launch.cuh), so where they are launched one by one (a batch
// size's first pass, before its graph) they must start only once this kernel is done. (Letting
// them start early gave wrong cascade-attention passes: cuda_backend_test's
// DecodeChainChangesNoToken.)
__global__ void __launch_bounds__(512) chain_prep_kernel(ChainPrep p) {
  constexpr int kPer = 4;
  const int64_t tid = threadIdx.x, items = p.fields * p.n;
  int32_t patch_at = 0, patch_page = 0, published = 0;
  int32_t v[kPer], from[kPer];
  // Round k0's host reads: item k = k0 + j * 512 + tid is field k / n of token k % n; field 0's
  // entry also needs the row of the step before that feeds it.
  const auto read_round = [&](int64_t k0) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t k = k0 + j * blockDim.x + tid;
      v[j] = k < items ? p.host_meta[(k / p.n) * p.pitch + k % p.n] : 0;
      from[j] = k < items && k < p.n && p.drawn != nullptr ? p.host_meta[p.from_field * p.pitch + k] : 0;
    }
  };
  const auto read_patch = [&] {
    if (tid < p.n_patches) {
      patch_at = p.patches[2 * tid];
      patch_page = p.patches[2 * tid + 1];
    }
  };
  read_patch();
  read_round(0);
  grid_dependency_wait();
  if (tid < p.n_publish) published = p.publish_from[tid];
  for (int64_t k0 = 0; k0 < items; k0 += kPer * blockDim.x) {
    if (k0 > 0) read_round(k0);
    int32_t drawn[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t k = k0 + j * blockDim.x + tid;
      // Field 0, the tokens: from the step before's draws where it gives them.
      drawn[j] = k < p.n && p.drawn != nullptr ? p.drawn[from[j]] : v[j];
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t k = k0 + j * blockDim.x + tid;
      if (k < items) p.meta[(k / p.n) * p.pitch + k % p.n] = drawn[j];
    }
  }
  if (tid < p.n_patches) p.table[patch_at] = patch_page;
  if (tid < p.n_publish) p.publish[tid] = published;
}
}  // namespace

void chain_prep(const ChainPrep& p, cudaStream_t stream) {
  launch_kernel(chain_prep_kernel, 1, 512, 0, stream, p);
}

void embedding(DType type, const void* table, const int32_t* ids, int64_t n_tokens, int64_t hidden, float* out,
               cudaStream_t stream) {
  if (n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(embedding_kernel<T>, static_cast<unsigned>(n_tokens), 256, 0, stream, static_cast<const T*>(table),
                  ids, hidden, out);
  });
}

}  // namespace kernelllm::cuda
