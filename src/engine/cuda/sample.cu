// The device sampler (sample.cuh): sample_block.h's draw_token with one cluster of `blocks`
// 512-thread blocks per draw (one block on devices without clusters), the block's barrier and
// shared-memory atomics, and the cluster's barrier and distributed shared memory behind the Ctx
// it expects.
#include <cooperative_groups.h>

#include "engine/cuda/launch.cuh"
#include "engine/cuda/sample.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kThreads = 512;
static_assert(kThreads <= sample_block::kMaxThreads && kThreads % 32 == 0);

// The Ctx of draw_token for a group of kBlocks blocks (a cluster when kBlocks > 1). Host-device
// members so that nvcc accepts the template's host side; only the kernel calls them.
template <int kBlocks>
struct DeviceGroup {
  __host__ __device__ int tid() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int threads() const { return kThreads; }
  __host__ __device__ int64_t first() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int64_t>(blockIdx.x % kBlocks) * kThreads + threadIdx.x;
#else
    return 0;
#endif
  }
  __host__ __device__ int64_t stride() const { return int64_t{kThreads} * kBlocks; }
  // The same for every lane of a warp: the trips of its first lane.
  __host__ __device__ int64_t trips(int64_t n) const {
    const int64_t warp_first = first() - (tid() & 31);
    return n > warp_first ? (n - warp_first + stride() - 1) / stride() : 0;
  }
  __host__ __device__ void sync() const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  // The warp's lanes with the same bucket add their values first (exactly: two 32-bit sums of
  // < 2^21 and < 2^20 parts, values < 2^41) and one of them adds the sum to the warp's copy:
  // shared 64-bit adds are compare-and-swap loops, and a flat row puts most items in a few
  // buckets, so one copy for all warps had them spinning on each other.
  __host__ __device__ void hist_add(uint64_t (*hist)[sample_block::kBuckets], uint32_t bucket, uint64_t v) const {
#if defined(__CUDA_ARCH__)
    if (__all_sync(0xFFFFFFFFu, v == 0)) return;  // most of a row's items in a pass past its first
    const uint32_t key = v != 0 ? bucket : 0xFFFFFFFFu;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, key);
    if (key == 0xFFFFFFFFu) return;
    const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(v & 0x1FFFFFu));
    const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(v >> 21));
    if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&hist[(threadIdx.x / 32) % sample_block::kCopies][bucket]),
                (static_cast<unsigned long long>(hi) << 21) + lo);
    }
#else
    (void)hist;
    (void)bucket;
    (void)v;
#endif
  }
  // The low word's add returns the old word, so the lane whose add wraps it counts the carry.
  __host__ __device__ void coarse_add(sample_block::Coarse& c, uint32_t bucket, uint64_t v) const {
#if defined(__CUDA_ARCH__)
    const auto lo = static_cast<unsigned>(v);
    const unsigned old = atomicAdd(&c.lo[bucket], lo);
    if (old + lo < old) atomicAdd(&c.carry[bucket], 1u);
    const auto hi = static_cast<unsigned>(v >> 32);
    if (hi != 0) atomicAdd(&c.hi[bucket], hi);
#else
    (void)c;
    (void)bucket;
    (void)v;
#endif
  }
  // The warp's takers get consecutive places from one atomic add; those past kListCap only count.
  __host__ __device__ void append(sample_block::Shared& sh, bool take, bool low, uint64_t item) const {
#if defined(__CUDA_ARCH__)
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, take);
    if (mask == 0) return;
    const unsigned low_mask = __ballot_sync(0xFFFFFFFFu, take && low);
    const int lane = static_cast<int>(threadIdx.x & 31), leader = __ffs(mask) - 1;
    unsigned base = 0;
    if (lane == leader) {
      base = atomicAdd(&sh.n_own, static_cast<unsigned>(__popc(mask)));
      if (low_mask != 0) atomicAdd(&sh.n_own_low, static_cast<unsigned>(__popc(low_mask)));
    }
    base = __shfl_sync(0xFFFFFFFFu, base, leader);
    const unsigned at = base + static_cast<unsigned>(__popc(mask & ((1u << lane) - 1)));
    if (take && at < static_cast<unsigned>(sample_block::kListCap)) sh.own[at] = item;
#else
    (void)sh;
    (void)take;
    (void)low;
    (void)item;
#endif
  }
  __host__ __device__ void min(uint32_t* p, uint32_t v) const {
#if defined(__CUDA_ARCH__)
    atomicMin(p, v);
#else
    (void)p;
    (void)v;
#endif
  }
  // a[0, nb) (nb <= kMax) summed over the cluster in every block: each block reads the cluster's
  // copies between two cluster barriers, then writes its own.
  template <int kMax>
  __host__ __device__ static void cluster_sum(uint64_t* a, int nb) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kBlocks > 1) {
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      constexpr int kPer = (kMax + kThreads - 1) / kThreads;
      uint64_t sums[kPer];
      cluster.sync();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int b = static_cast<int>(threadIdx.x) + j * kThreads;
        sums[j] = 0;
        if (b < nb) {
#pragma unroll 4
          for (int r = 0; r < kBlocks; ++r) sums[j] += *cluster.map_shared_rank(&a[b], r);
        }
      }
      cluster.sync();
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int b = static_cast<int>(threadIdx.x) + j * kThreads;
        if (b < nb) a[b] = sums[j];
      }
      __syncthreads();
    }
#elif defined(__CUDA_ARCH__)
    if constexpr (kBlocks > 1) __trap();  // clusters need compute capability 9.0
#endif
    (void)a;
    (void)nb;
  }
  __host__ __device__ void combine_hist(sample_block::Shared& sh, int nb) const {
    cluster_sum<sample_block::kBuckets>(sh.hist[0], nb);
  }
  __host__ __device__ void combine_coarse(sample_block::Shared& sh) const {
    cluster_sum<sample_block::kCoarse>(sh.coarse.weight, sample_block::kCoarse);
  }
  // The cluster's own lists, in rank order, into this block's list where they all fit; a cluster
  // barrier after the reads, so no block gathers anew while another still reads its list.
  __host__ __device__ void merge_lists(sample_block::Shared& sh) const {
#if defined(__CUDA_ARCH__)
    constexpr auto kCap = static_cast<uint32_t>(sample_block::kListCap);
    if constexpr (kBlocks > 1) {
#if __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      uint32_t total = 0, low = 0;
#pragma unroll
      for (int r = 0; r < kBlocks; ++r) {
        const sample_block::Shared& o = *cluster.map_shared_rank(&sh, r);
        total += o.n_own;
        low += o.n_own_low;
      }
      if (total <= kCap) {
        uint32_t off = 0;
        for (int r = 0; r < kBlocks; ++r) {
          const sample_block::Shared& o = *cluster.map_shared_rank(&sh, r);
          const uint32_t cnt = o.n_own;
          for (uint32_t i = threadIdx.x; i < cnt; i += kThreads) sh.list[off + i] = o.own[i];
          off += cnt;
        }
      }
      cluster.sync();
      if (threadIdx.x == 0) {
        sh.n_list = total;
        sh.n_list_low = low;
      }
#else
      __trap();  // clusters need compute capability 9.0
#endif
    } else {
      if (sh.n_own <= kCap) {
        for (uint32_t i = threadIdx.x; i < sh.n_own; i += kThreads) sh.list[i] = sh.own[i];
      }
      __syncthreads();  // every thread has read n_own before thread 0 copies it
      if (threadIdx.x == 0) {
        sh.n_list = sh.n_own;
        sh.n_list_low = sh.n_own_low;
      }
    }
    __syncthreads();
#endif
    (void)sh;
  }
  __host__ __device__ void combine_min(uint32_t* p) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kBlocks > 1) {
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      uint32_t m = *p;
      if (threadIdx.x == 0) {
#pragma unroll
        for (int r = 0; r < kBlocks; ++r) m = ::min(m, *cluster.map_shared_rank(p, r));
      }
      cluster.sync();
      if (threadIdx.x == 0) *p = m;
      __syncthreads();
    }
#elif defined(__CUDA_ARCH__)
    if constexpr (kBlocks > 1) __trap();
#endif
    (void)p;
  }
};

template <int kBlocks>
__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(const float* logits, int64_t vocab, const sample_block::Draw* draws, int32_t* ids) {
  wait_for_predecessor();
  extern __shared__ __align__(16) unsigned char smem[];  // sizeof(Shared): past the static 48 KB
  sample_block::Shared& sh = *reinterpret_cast<sample_block::Shared*>(smem);
  DeviceGroup<kBlocks> ctx;
  const unsigned draw = blockIdx.x / kBlocks;
  const sample_block::Draw d = draws[draw];
  const int32_t token = sample_block::draw_token(ctx, sh, logits + d.row * vocab, vocab, d);
  if (threadIdx.x == 0 && blockIdx.x % kBlocks == 0) ids[draw] = token;
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const sample_block::Draw* draws, int64_t n_draws, int32_t* ids,
                 int blocks_per_draw, cudaStream_t stream) {
  if (n_draws == 0) return;
  dispatch_row_cluster(blocks_per_draw, [&](auto b) {
    constexpr int B = decltype(b)::value;
    allow_dynamic_smem<sample_kernel<B>>(sizeof(sample_block::Shared));
    launch_row_clusters<sample_kernel<B>>(n_draws, B, kThreads, stream, sizeof(sample_block::Shared), logits, vocab,
                                          draws, ids);
  });
}

}  // namespace kernelllm::cuda
