// The cascade's prefix kernel on Hopper's warpgroup MMA (wgmma); see attention_shared.cuh.
//
// A block per (prefix split, KV head, item stride) as attention_shared.cu's prefix_kernel, but:
// - warp 8 is a producer: its lane 0 copies each tile of 64 prompt positions (K and V, one TMA
//   box of a page's rows x 64 head dims at a time, 128-byte swizzled) into a ring of stages in
//   shared memory, counted on the stage's "full" mbarrier; the prompt's pages are never written
//   after the fork, so its copies go out before the wait for the previous kernel;
// - warps 0..7 are two warpgroups of 64 query rows (row = member * group + head, as before):
//   S = Q.K^T for the whole tile is 16 wgmma m64n64k16 per warpgroup (the queries' high and low
//   halves in the cache dtype, written once per item into shared memory in the same swizzled
//   layout, and K straight from the stage), the online softmax in registers (mma.cuh's softmax_tile: the accumulator layout is
//   mma.sync's), and O += P.V on mma.sync with V by ldmatrix.trans from the stage (P split into
//   high and low halves, as before). Then every consumer thread arrives on the stage's "empty"
//   mbarrier, which the producer waits on before refilling it.
// A split's positions are whole pages (its chunk rounded up to the page size), so a tile's
// 16-position steps are each all inside the split or all past it: those past it are never
// multiplied into O, and their scores are masked (the stale K there is never used).
// Where the time went before: bench/cuda_ops/NOTES.md items 31-35.
#include <cuda.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kTile = 64;  // prompt positions per stage
constexpr int kStages = 3;
constexpr int kConsumers = 256;  // two warpgroups
constexpr int kThreads = kConsumers + 32;
constexpr int64_t kItemBlocks = 2;  // blocks per (split, KV head), each taking every 2nd item

// The wgmma instructions need sm_90a; other targets never launch this kernel
// (prefix_wgmma_supported checks the device).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KLLM_WGMMA 1
#endif

// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzled layout TMA writes
// (rows of 128 bytes, 8-row groups 1,024 bytes apart); `p` may point 32, 64 or 96 bytes into a row
// (the next 16 elements of K).
__device__ __forceinline__ uint64_t sw128_desc(const void* p) {
  return (uint64_t{(smem_addr(p) >> 4) & 0x3FFFu}) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef KLLM_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit_wait() {
#ifdef KLLM_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving uses of an accumulator across the wait (the registers are
// written asynchronously until it returns).
__device__ __forceinline__ void fence_acc(float (&d)[8][4]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
  }
}

// d (+)= A . B for a warpgroup's 64 x 64 tile, both operands in shared memory as given by their
// descriptors (A: 64 x 16, B: 16 x 64, both K-major); d in mma.sync's C layout per 8-column tile
// (warp w of the group holds rows 16w..16w + 15).
template <class T>
__device__ __forceinline__ void wgmma_64x64(float (&d)[8][4], uint64_t a, uint64_t b, bool accumulate) {
#ifdef KLLM_WGMMA
#define KLLM_WGMMA_ARGS(TYPE)                                                                                          \
  asm volatile(                                                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                    \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                                      \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "    \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                   \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),      \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),      \
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),      \
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),      \
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])                                                    \
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0))
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    KLLM_WGMMA_ARGS("bf16");
  } else {
    KLLM_WGMMA_ARGS("f16");
  }
#undef KLLM_WGMMA_ARGS
#else
  (void)d;
  (void)a;
  (void)b;
  (void)accumulate;
  __trap();
#endif
}

// Named barrier over the 128 threads of warpgroup `wg` (ids 1, 2; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}

// An item's positions in this split (whole pages) and its page-table row.
struct Range {
  int begin, end;
  const int32_t* table;
};
__device__ __forceinline__ Range split_range(const AttentionArgs& a, const SharedPrefixArgs& s, int64_t item,
                                             int64_t split, int splits) {
  const int prefix = s.item_prefix[item], pt = static_cast<int>(a.kv.page_tokens);
  const int chunk = ((prefix + splits - 1) / splits + pt - 1) / pt * pt;
  Range r;
  r.begin = min(prefix, static_cast<int>(split) * chunk);
  r.end = min(prefix, r.begin + chunk);
  r.table = a.block_table + static_cast<int64_t>(s.item_seq[item]) * a.table_width;
  return r;
}

// Grid: (prefix split, KV head, item stride), as prefix_kernel's.
template <class T, int HD>
__global__ void __launch_bounds__(kThreads, 1)
    prefix_wgmma_kernel(const __grid_constant__ CUtensorMap kv_map, AttentionArgs a, SharedPrefixArgs s,
                        int suffix_splits) {
  constexpr int KS = HD / 16;       // k-steps over head dims (16 columns of a 64-dim box each)
  constexpr int ND = HD / 8;        // output n-tiles
  constexpr int kHalves = HD / 64;  // 64-dim boxes per row
  constexpr int kHalfElems = kTile * 64;
  constexpr int kStageElems = 2 * kHalves * kHalfElems;  // K then V
  constexpr float kLn2 = 0.6931471805599453f;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const ring = reinterpret_cast<T*>(smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024));
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  const auto stage_k = [&](int slot, int half) { return ring + slot * kStageElems + half * kHalfElems; };
  const auto stage_v = [&](int slot, int half) { return ring + slot * kStageElems + (kHalves + half) * kHalfElems; };
  // After the ring: each warpgroup's 64 query rows, high (hl = 0) and low halves, by 64-dim box.
  const auto stage_q = [&](int wg, int hl, int half) {
    return ring + kStages * kStageElems + ((wg * 2 + hl) * kHalves + half) * kHalfElems;
  };

  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int group = static_cast<int>(a.heads / a.kv_heads), heads = static_cast<int>(a.heads);
  const int splits = static_cast<int>(gridDim.x), pt = static_cast<int>(a.kv.page_tokens);
  const int64_t split = blockIdx.x, g = blockIdx.y;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();
  // Items of this block: blockIdx.z, + gridDim.z, ... up to the first unused one (items are packed).
  const auto item_used = [&](int64_t item) { return item < a.n_tokens && s.item_count[item] > 0; };
  if (!item_used(blockIdx.z)) return;  // no items: nothing to wait for

  if (warp == kConsumers / 32) {
    if (lane != 0) return;
    asm volatile("prefetch.tensormap [%0];" ::"l"(&kv_map) : "memory");
    int t = 0;  // tiles issued
    for (int64_t item = blockIdx.z; item_used(item); item += gridDim.z) {
      const Range r = split_range(a, s, item, split, splits);
      for (int tile = r.begin; tile < r.end; tile += kTile, ++t) {
        const int slot = t % kStages;
        if (t >= kStages) mbar_wait(&empty[slot], static_cast<unsigned>(t / kStages - 1) & 1u);
        const int pages = min(kTile, r.end - tile) / pt;
        mbar_expect_tx(&full[slot], static_cast<unsigned>(pages * pt * HD * 2 * static_cast<int>(sizeof(T))));
        for (int p = 0; p < pages; ++p) {
          const int64_t page = r.table[(tile + p * pt) / pt];
          const int row = static_cast<int>(((page * a.kv.layers + a.layer) * 2) * pt);
#pragma unroll
          for (int h = 0; h < kHalves; ++h) {
            const int col = static_cast<int>(g) * HD + h * 64;
            tma_box(stage_k(slot, h) + p * pt * 64, &kv_map, col, row, &full[slot]);
            tma_box(stage_v(slot, h) + p * pt * 64, &kv_map, col, row + pt, &full[slot]);
          }
        }
      }
    }
    return;
  }

  wait_for_predecessor();
  const float scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;
  const int wg_rows0 = (warp / 4) * 64;
  int t = 0;  // tiles consumed
  for (int64_t item = blockIdx.z; item_used(item); item += gridDim.z) {
    const Range r = split_range(a, s, item, split, splits);
    const int rows = s.item_count[item] * group;
    const int32_t* members = s.members + s.item_first[item];
    if (r.begin >= r.end) {  // nothing here: empty statistics, which the merge skips
      for (int row = tid; row < rows; row += kConsumers) {
        const int64_t slot = (static_cast<int64_t>(members[row / group]) * heads + g * group + row % group) * a.splits +
                             suffix_splits + split;
        a.partial_ml[slot * 2] = -FLT_MAX;
        a.partial_ml[slot * 2 + 1] = 0.0f;
      }
      continue;
    }
    // This thread's two query rows: gq (r = 0) and gq + 8 (r = 1) of the warp's 16.
    bool row_ok[2];
    int head[2];  // token * heads + head
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = warp * 16 + gq + rr * 8;
      row_ok[rr] = row < rows;
      head[rr] = (row_ok[rr] ? members[row / group] : 0) * heads + static_cast<int>(g) * group + row % group;
    }
    const bool active = wg_rows0 < rows;  // the same for the whole warpgroup
    if (active) {
      // The queries' halves into this warpgroup's rows (the last item's products are all done:
      // each tile waits for its own), then made visible to the tensor cores' reads.
#pragma unroll 4
      for (int i = 0; i < HD / 8; ++i) {
        const int dim = 2 * (i * 4 + tq);  // the quad's threads take consecutive pairs of a row
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float2 q = make_float2(0.0f, 0.0f);
          if (row_ok[rr]) q = *reinterpret_cast<const float2*>(a.q + static_cast<int64_t>(head[rr]) * HD + dim);
          uint32_t hi, lo;
          split2<T>(q.x, q.y, hi, lo);
          const int at = swizzled_elem((warp % 4) * 16 + gq + rr * 8, (dim % 64) / 8) + dim % 8;
          *reinterpret_cast<uint32_t*>(stage_q(warp / 4, 0, dim / 64) + at) = hi;
          *reinterpret_cast<uint32_t*>(stage_q(warp / 4, 1, dim / 64) + at) = lo;
        }
      }
      async_proxy_fence();
      warpgroup_sync(warp / 4);
    }
    float o[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int tile = r.begin; tile < r.end; tile += kTile, ++t) {
      const int slot = t % kStages;
      mbar_wait(&full[slot], static_cast<unsigned>(t / kStages) & 1u);
      if (active) {
        float sc[8][4] = {};
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const uint64_t kd = sw128_desc(stage_k(slot, ks / 4) + (ks % 4) * 16);
          wgmma_64x64<T>(sc, sw128_desc(stage_q(warp / 4, 0, ks / 4) + (ks % 4) * 16), kd, ks > 0);
          wgmma_64x64<T>(sc, sw128_desc(stage_q(warp / 4, 1, ks / 4) + (ks % 4) * 16), kd, true);
        }
        wgmma_commit_wait();
        fence_acc(sc);
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int pos = tile + nb * 8 + 2 * tq + (e & 1);
            sc[nb][e] = pos < r.end ? sc[nb][e] * scale_log2 : -INFINITY;
            row_max[e >> 1] = fmaxf(row_max[e >> 1], sc[nb][e]);
          }
        }
        softmax_tile(sc, row_max, m, l, o);
#pragma unroll
        for (int k2 = 0; k2 < kTile / 16; ++k2) {
          if (tile + k2 * 16 >= r.end) break;  // past the split: never loaded
          uint32_t ph[4], pl[4];
          split2<T>(sc[2 * k2][0], sc[2 * k2][1], ph[0], pl[0]);
          split2<T>(sc[2 * k2][2], sc[2 * k2][3], ph[1], pl[1]);
          split2<T>(sc[2 * k2 + 1][0], sc[2 * k2 + 1][1], ph[2], pl[2]);
          split2<T>(sc[2 * k2 + 1][2], sc[2 * k2 + 1][3], ph[3], pl[3]);
          // Lane l addresses row (l % 8) of matrix l / 8: positions k2*16 + (l%8) + 8*((l/8)&1),
          // dims n0 + 8*(l/16); the four registers are b0, b1 of n-tile n0 and of n0 + 8.
          const int prow = k2 * 16 + (lane % 8) + ((lane / 8) & 1) * 8;
#pragma unroll
          for (int nd = 0; nd < ND; nd += 2) {
            const int dim = nd * 8 + (lane / 16) * 8;
            uint32_t b[4];
            ldmatrix_x4_trans(b, stage_v(slot, dim / 64) + swizzled_elem(prow, (dim % 64) / 8));
            mma<T>(o[nd], ph, b[0], b[1]);
            mma<T>(o[nd], pl, b[0], b[1]);
            mma<T>(o[nd + 1], ph, b[2], b[3]);
            mma<T>(o[nd + 1], pl, b[2], b[3]);
          }
        }
      }
      mbar_arrive(&empty[slot]);
    }
    if (!active) continue;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
      l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      if (!row_ok[rr]) continue;
      const int64_t slot = static_cast<int64_t>(head[rr]) * a.splits + suffix_splits + split;
      float* acc = a.partial_acc + slot * HD;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        *reinterpret_cast<float2*>(acc + nd * 8 + 2 * tq) = make_float2(o[nd][2 * rr], o[nd][2 * rr + 1]);
      }
      if (tq == 0) {
        const bool any = l[rr] > 0.0f;
        a.partial_ml[slot * 2] = any ? m[rr] * kLn2 : -FLT_MAX;
        a.partial_ml[slot * 2 + 1] = any ? l[rr] : 0.0f;
      }
    }
  }
}

template <class T, int HD>
void launch(const CUtensorMap& map, const AttentionArgs& a, const SharedPrefixArgs& s, int64_t suffix_splits,
            int64_t prefix_splits, cudaStream_t stream) {
  const auto kernel = prefix_wgmma_kernel<T, HD>;
  // The ring's stages (K and V) and the two warpgroups' query halves.
  const size_t smem = (static_cast<size_t>(kStages) * 2 * kTile + 4 * 64) * HD * sizeof(T) + 1024;
  static const bool sized =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) == cudaSuccess;
  (void)sized;
  const dim3 grid(static_cast<unsigned>(prefix_splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(std::min(kItemBlocks, a.n_tokens)));
  launch_kernel(kernel, grid, dim3(kThreads), smem, stream, map, a, s, static_cast<int>(suffix_splits));
}

}  // namespace

bool prefix_wgmma_supported(DType type, const AttentionArgs& a) {
  if ((type != DType::bf16 && type != DType::f16) || (a.head_dim != 64 && a.head_dim != 128) || a.kv.pages < 1 ||
      (a.kv.page_tokens != 16 && a.kv.page_tokens != 32 && a.kv.page_tokens != 64) || a.kv_heads < 1 ||
      a.heads % a.kv_heads != 0 || a.heads / a.kv_heads > kMaxAttentionGroup) {
    return false;
  }
  // The whole pool as one matrix of rows (a page's K or V rows of one layer) x kv_dim: its row
  // coordinates must fit TMA's 32-bit ones.
  if (a.kv.pages * a.kv.layers * 2 * a.kv.page_tokens >= (int64_t{1} << 31)) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;  // sm_90a code only
}

bool prefix_attention_wgmma(DType type, const AttentionArgs& a, const SharedPrefixArgs& s, int64_t suffix_splits,
                            int64_t prefix_splits, cudaStream_t stream) {
  CUtensorMap map;
  if (!tma_map_2d(map, type, a.kv.pool, a.kv.pages * a.kv.layers * 2 * a.kv.page_tokens, a.kv.kv_dim,
                  static_cast<int>(a.kv.page_tokens))) {
    return false;
  }
  if (type == DType::f16) {
    if (a.head_dim == 64) {
      launch<__half, 64>(map, a, s, suffix_splits, prefix_splits, stream);
    } else {
      launch<__half, 128>(map, a, s, suffix_splits, prefix_splits, stream);
    }
  } else if (a.head_dim == 64) {
    launch<__nv_bfloat16, 64>(map, a, s, suffix_splits, prefix_splits, stream);
  } else {
    launch<__nv_bfloat16, 128>(map, a, s, suffix_splits, prefix_splits, stream);
  }
  return true;
}

}  // namespace kernelllm::cuda
