// Shared-prefix decode attention; see attention_shared.cuh. The prefix kernel: a block per
// (prefix split, KV head) taking the items in turn, 5 warps, warp w owning query rows
// [16w, 16w + 16) of the item (row = member * group + head). The block's K and V tiles of 32
// positions are copied by cp.async into a ring of kRing tiles in shared memory, the first ones
// before the wait for the previous kernel (the prompt's pages are constant); the queries go into
// shared memory once per item, as a high and a low half in the cache dtype. S = Q.K^T and
// O += P.V run on mma.sync m16n8k16 with every operand taken by ldmatrix, Q and P in both halves
// (two products each), so the result matches the fp32 split kernel to about fp32 accuracy. Each
// row's (max, sum, unnormalized output) goes into the split slots after the suffix's, and
// attention_merge combines them.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarps = static_cast<int>(kSharedRows / 16);
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 32;
constexpr int kPad = 8;                   // row padding (elements): ldmatrix rows on distinct banks
constexpr int kRing = 4;                  // K/V tiles in flight per block
// Registers held to three blocks' worth per SM (<= 136; 129 for bf16 / f16 at head_dim 128), so
// two own-position blocks (4 warps of <= 160) fit beside a block of this kernel.
#ifndef KLLM_PREFIX_MIN_BLOCKS
#define KLLM_PREFIX_MIN_BLOCKS 3
#endif
constexpr int kMinBlocks = KLLM_PREFIX_MIN_BLOCKS;
constexpr int64_t kSharedItemBlocks = 2;  // blocks per (split, KV head), each taking every 2nd item

// The kernel's dynamic shared memory, in T elements: the queries' high and low halves
// (kSharedRows rows each), then the ring's slots of kTile K rows followed by kTile V rows.
template <int HD>
struct PrefixSmem {
  static constexpr int kRow = HD + kPad;
  static constexpr size_t kQ = static_cast<size_t>(kSharedRows) * kRow;
  static constexpr size_t kSlot = size_t{2} * kTile * kRow;
  static constexpr size_t kElems = 2 * kQ + kRing * kSlot;
};

// K and V rows [tile, tile + kTile) of KV head g below `end` into a ring slot by cp.async, zeros
// past `end`; the caller commits the group.
template <class T, int HD>
__device__ __forceinline__ void copy_tile(const AttentionArgs& a, const int32_t* table, int64_t g, int64_t tile,
                                          int64_t end, T (*sK)[HD + kPad], T (*sV)[HD + kPad]) {
  constexpr int kChunks = kTile * HD / 8;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const int64_t kv_dim = a.kv.kv_dim, pt = a.kv.page_tokens;
  for (int c = static_cast<int>(threadIdx.x); c < kChunks; c += kThreads) {
    const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
    const int64_t pos = tile + p;
    const bool ok = pos < end;
    const T* kp = ok ? paged_k_row(pool, table, static_cast<int>(pos), static_cast<int>(pt), a.kv.layers, a.layer,
                                   kv_dim) + g * HD + d0
                     : pool;
    cp_async16(&sK[p][d0], kp, ok);
    cp_async16(&sV[p][d0], ok ? kp + pt * kv_dim : pool, ok);
  }
}

// Grid: (prefix split, KV head, item stride); a block takes items blockIdx.z, + gridDim.z, ...
// up to the first unused one, so the grid stays small and fixed while the plan changes.
// kBeside: the own-position kernel follows without waiting for anything (attention_suffix.cu),
// so this kernel lets it launch only after its own wait, once the kernel before both is done.
template <class T, int HD, bool kBeside>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    prefix_kernel(AttentionArgs a, SharedPrefixArgs s, int suffix_splits) {
  constexpr int KS = HD / 16;  // k-steps over head dims
  constexpr int ND = HD / 8;   // output n-tiles
  constexpr int NB = kTile / 8;
  constexpr int kRow = PrefixSmem<HD>::kRow;
  constexpr float kLn2 = 0.6931471805599453f;
  extern __shared__ __align__(16) unsigned char prefix_smem[];
  T* const smem = reinterpret_cast<T*>(prefix_smem);
  T(*const sQh)[kRow] = reinterpret_cast<T(*)[kRow]>(smem);
  T(*const sQl)[kRow] = sQh + kSharedRows;
  const auto slot_k = [&](int j) {
    return reinterpret_cast<T(*)[kRow]>(smem + 2 * PrefixSmem<HD>::kQ + (j % kRing) * PrefixSmem<HD>::kSlot);
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int group = static_cast<int>(a.heads / a.kv_heads), heads = static_cast<int>(a.heads);
  const int64_t split = blockIdx.x, g = blockIdx.y;
  // An item's range in this split, its page-table row and query rows.
  struct Item {
    int begin, end;
    const int32_t* table;
    int rows;
    const int32_t* members;
  };
  const auto plan_item = [&](int64_t item) {
    Item it;
    const int prefix = s.item_prefix[item];
    const int chunk = (prefix + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    it.begin = min(prefix, static_cast<int>(split) * chunk);
    it.end = min(prefix, it.begin + chunk);
    it.table = a.block_table + static_cast<int64_t>(s.item_seq[item]) * a.table_width;
    it.rows = s.item_count[item] * group;
    it.members = s.members + s.item_first[item];
    return it;
  };
  // Tile j of an item into ring slot j % kRing as one commit group (empty past the item's end, so
  // that tile j's group is always the kRing-th last at its turn).
  const auto issue = [&](const Item& item, int j) {
    const int64_t tile = item.begin + static_cast<int64_t>(j) * kTile;
    if (tile < item.end) copy_tile<T, HD>(a, item.table, g, tile, item.end, slot_k(j), slot_k(j) + kTile);
    cp_async_commit();
  };
  // The plan is uploaded before the pass and shared pages are never written after the fork: the
  // first item's plan and its first kRing tiles are copied (the rest of its rows fetched into L2)
  // while the previous kernel still runs. Only the queries wait.
  Item it{};
  const bool first = blockIdx.z < a.n_tokens && s.item_count[blockIdx.z] > 0;
  if (first) {
    it = plan_item(blockIdx.z);
    for (int j = 0; j < kRing; ++j) issue(it, j);
    prefetch_kv_rows(static_cast<const T*>(a.kv.pool), it.table, it.begin + kRing * kTile, it.end,
                     static_cast<int>(a.kv.page_tokens), a.kv.layers, a.layer, a.kv.kv_dim, g * HD, HD,
                     static_cast<int>(threadIdx.x), kThreads);
  }
  if constexpr (kBeside) {
    grid_dependency_wait();
    allow_dependent_launch();
  } else {
    wait_for_predecessor();
  }
  const float scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;

  for (int64_t item = blockIdx.z; item < a.n_tokens && first; item += gridDim.z) {
    if (item != blockIdx.z) {
      if (s.item_count[item] == 0) break;  // items are packed: the rest are unused
      it = plan_item(item);
      __syncthreads();  // the previous item is done with the ring and the queries
      for (int j = 0; j < kRing; ++j) issue(it, j);
    }
    const int64_t begin = it.begin, end = it.end;
    if (begin >= end) {  // nothing here: empty statistics, which the merge skips
      for (int row = static_cast<int>(threadIdx.x); row < it.rows; row += kThreads) {
        const int64_t member = it.members[row / group];
        const int64_t slot = (member * heads + g * group + row % group) * a.splits + suffix_splits + split;
        a.partial_ml[slot * 2] = -FLT_MAX;
        a.partial_ml[slot * 2 + 1] = 0.0f;
      }
      continue;
    }
    // The queries of the active warps' rows (zeros past the item's), both halves.
    const int q_rows = min(static_cast<int>(kSharedRows), (it.rows + 15) / 16 * 16);
    for (int c = static_cast<int>(threadIdx.x); c < q_rows * (HD / 4); c += kThreads) {
      const int row = c / (HD / 4), d0 = (c % (HD / 4)) * 4;
      float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row < it.rows) {
        const int64_t head = static_cast<int64_t>(it.members[row / group]) * heads + g * group + row % group;
        q = *reinterpret_cast<const float4*>(a.q + head * HD + d0);
      }
      uint2 hi, lo;
      split2<T>(q.x, q.y, hi.x, lo.x);
      split2<T>(q.z, q.w, hi.y, lo.y);
      *reinterpret_cast<uint2*>(&sQh[row][d0]) = hi;
      *reinterpret_cast<uint2*>(&sQl[row][d0]) = lo;
    }
    const bool active = warp * 16 < it.rows;
    // ldmatrix lanes: A (the queries) rows warp * 16 + (lane % 16), columns + 8 (lane / 16);
    // B (K rows, n-tiles nb and nb + 1) row (lane / 16) * 8 + lane % 8, columns + 8 ((lane / 8) % 2).
    const int a_row = warp * 16 + lane % 16, a_col = (lane / 16) * 8;
    const int b_row = (lane / 16) * 8 + lane % 8, b_col = ((lane / 8) % 2) * 8;
    float o[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    int j = 0;
    for (int64_t tile = begin; tile < end; tile += kTile, ++j) {
      if (j > 0) {
        __syncthreads();  // every warp is done with the previous tile's slot: refill it
        issue(it, j - 1 + kRing);
      }
      cp_async_wait<kRing - 1>();
      __syncthreads();  // tile j has landed (every thread's copies), and the queries are stored
      T(*const sK)[kRow] = slot_k(j);
      T(*const sV)[kRow] = sK + kTile;
      if (!active) continue;

      float sc[NB][4];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t qh[4], ql[4];
        ldmatrix_x4(qh, &sQh[a_row][ks * 16 + a_col]);
        ldmatrix_x4(ql, &sQl[a_row][ks * 16 + a_col]);
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, &sK[nb * 8 + b_row][ks * 16 + b_col]);
          mma<T>(sc[nb], qh, b[0], b[1]);
          mma<T>(sc[nb + 1], qh, b[2], b[3]);
          mma<T>(sc[nb], ql, b[0], b[1]);
          mma<T>(sc[nb + 1], ql, b[2], b[3]);
        }
      }
      float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t pos = tile + nb * 8 + 2 * tq + (e & 1);
          sc[nb][e] = pos < end ? sc[nb][e] * scale_log2 : -INFINITY;
          row_max[e >> 1] = fmaxf(row_max[e >> 1], sc[nb][e]);
        }
      }
      float corr[2], base[2];
      online_softmax_step(row_max, m, l, corr, base);
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        o[nd][0] *= corr[0];
        o[nd][1] *= corr[0];
        o[nd][2] *= corr[1];
        o[nd][3] *= corr[1];
      }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sc[nb][e] = exp2f(sc[nb][e] - base[e >> 1]);
          l[e >> 1] += sc[nb][e];
        }
      }
#pragma unroll
      for (int k2 = 0; k2 < kTile / 16; ++k2) {
        uint32_t ph[4], pl[4];
        split2<T>(sc[2 * k2][0], sc[2 * k2][1], ph[0], pl[0]);
        split2<T>(sc[2 * k2][2], sc[2 * k2][3], ph[1], pl[1]);
        split2<T>(sc[2 * k2 + 1][0], sc[2 * k2 + 1][1], ph[2], pl[2]);
        split2<T>(sc[2 * k2 + 1][2], sc[2 * k2 + 1][3], ph[3], pl[3]);
        // Lane l addresses row (l % 8) of matrix l / 8: positions k2*16 + (l%8) + 8*((l/8)&1),
        // dims n0 + 8*(l/16); the four registers are b0, b1 of n-tile n0 and of n0 + 8.
        const int prow = k2 * 16 + (lane % 8) + ((lane / 8) & 1) * 8;
        const int pcol = (lane / 16) * 8;
#pragma unroll
        for (int nd = 0; nd < ND; nd += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, &sV[prow][nd * 8 + pcol]);
          mma<T>(o[nd], ph, b[0], b[1]);
          mma<T>(o[nd], pl, b[0], b[1]);
          mma<T>(o[nd + 1], ph, b[2], b[3]);
          mma<T>(o[nd + 1], pl, b[2], b[3]);
        }
      }
    }
    if (!active) continue;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + gq + r * 8;
      if (row >= it.rows) continue;
      const int64_t head = static_cast<int64_t>(it.members[row / group]) * heads + g * group + row % group;
      const int64_t slot = head * a.splits + suffix_splits + split;
      float* acc = a.partial_acc + slot * HD;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        *reinterpret_cast<float2*>(acc + nd * 8 + 2 * tq) = make_float2(o[nd][2 * r], o[nd][2 * r + 1]);
      }
      if (tq == 0) {
        const bool any = l[r] > 0.0f;
        a.partial_ml[slot * 2] = any ? m[r] * kLn2 : -FLT_MAX;
        a.partial_ml[slot * 2 + 1] = any ? l[r] : 0.0f;
      }
    }
  }
  cp_async_wait<0>();  // nothing of this block's left in flight when it exits
}

template <class T, int HD, bool kBeside>
void launch_prefix_hd(const AttentionArgs& a, const SharedPrefixArgs& s, int suffix_splits, const dim3& grid,
                      cudaStream_t stream) {
  size_t kBytes = PrefixSmem<HD>::kElems * sizeof(T);
#ifdef KLLM_PREFIX_ONE_PER_SM
  {
    int dev = 0, sm_bytes = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    kBytes = std::max<size_t>(kBytes, static_cast<size_t>(sm_bytes) / 2 + 1024);
  }
#endif
  static const bool sized = cudaFuncSetAttribute(prefix_kernel<T, HD, kBeside>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(kBytes)) == cudaSuccess;
  (void)sized;  // a failure shows as the launch's error
  launch_kernel(prefix_kernel<T, HD, kBeside>, grid, kThreads, kBytes, stream, a, s, suffix_splits);
}

template <class T, bool kBeside>
void launch_prefix(const AttentionArgs& a, const SharedPrefixArgs& s, int64_t suffix_splits, int64_t prefix_splits,
                   cudaStream_t stream) {
  // Beside: every prefix block must be resident before the own-position kernel may launch, so one
  // block per (split, KV head) takes all the items.
  const int64_t item_blocks = kBeside ? 1 : std::min(kSharedItemBlocks, a.n_tokens);
  const dim3 grid(static_cast<unsigned>(prefix_splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(item_blocks));
  const int ss = static_cast<int>(suffix_splits);
  switch (a.head_dim) {
    case 16: launch_prefix_hd<T, 16, kBeside>(a, s, ss, grid, stream); break;
    case 32: launch_prefix_hd<T, 32, kBeside>(a, s, ss, grid, stream); break;
    case 64: launch_prefix_hd<T, 64, kBeside>(a, s, ss, grid, stream); break;
    default: launch_prefix_hd<T, 128, kBeside>(a, s, ss, grid, stream); break;
  }
}

}  // namespace

void plan_shared_prefix(const std::vector<const std::vector<int32_t>*>& pages, const std::vector<int32_t>& pos,
                        const std::vector<int32_t>& seq, int64_t page_tokens, int64_t group, SharedPrefixPlan& plan) {
  const size_t n = pos.size();
  plan.ctx_begin.assign(n, 0);
  plan.item_seq.assign(n, 0);
  plan.item_prefix.assign(n, 0);
  plan.item_first.assign(n, 0);
  plan.item_count.assign(n, 0);
  plan.members.clear();
  plan.shared = false;
  const auto max_members = static_cast<size_t>(std::max<int64_t>(1, kSharedRows / group));
  std::vector<bool> done(n, false);
  size_t items = 0;
  auto add_item = [&](const std::vector<size_t>& toks, size_t from, size_t cnt, int64_t prefix) {
    plan.item_seq[items] = seq[toks[from]];
    plan.item_prefix[items] = static_cast<int32_t>(prefix);
    plan.item_first[items] = static_cast<int32_t>(plan.members.size());
    plan.item_count[items] = static_cast<int32_t>(cnt);
    for (size_t k = from; k < from + cnt; ++k) {
      plan.members.push_back(static_cast<int32_t>(toks[k]));
      plan.ctx_begin[toks[k]] = static_cast<int32_t>(prefix);
      done[toks[k]] = true;
    }
    plan.shared = plan.shared || (cnt >= 2 && prefix > 0);
    ++items;
  };
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    const std::vector<int32_t>& pi = *pages[i];
    std::vector<size_t> toks = {i};
    // Only pages before the page of pos are complete for every member (a shared page is
    // never written after the fork; the page of pos was made private by extend()).
    int64_t common = pos[i] / page_tokens;
    if (common > 0) {
      for (size_t j = i + 1; j < n; ++j) {
        if (!done[j] && pos[j] / page_tokens > 0 && (*pages[j])[0] == pi[0]) toks.push_back(j);
      }
    }
    for (size_t k = 1; k < toks.size(); ++k) {
      const std::vector<int32_t>& pj = *pages[toks[k]];
      common = std::min<int64_t>(common, pos[toks[k]] / page_tokens);
      int64_t c = 0;
      while (c < common && pj[static_cast<size_t>(c)] == pi[static_cast<size_t>(c)]) ++c;
      common = c;
    }
    if (toks.size() < 2 || common == 0) {
      add_item({i}, 0, 1, 0);
      continue;
    }
    for (size_t from = 0; from < toks.size(); from += max_members) {
      add_item(toks, from, std::min(max_members, toks.size() - from), common * page_tokens);
    }
  }
}

bool shared_prefix_supported(DType type, int64_t head_dim, int64_t group) {
  return (type == DType::bf16 || type == DType::f16) &&
         (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8;
}

void shared_prefix_attention(DType type, const AttentionArgs& args, const SharedPrefixArgs& shared,
                             int64_t suffix_splits, int64_t prefix_splits, cudaStream_t stream, OwnPositions own) {
  if (args.n_tokens == 0) return;
  const bool mma =
      own != OwnPositions::split_kernel && suffix_mma_supported(type, args.head_dim, args.heads / args.kv_heads);
  const bool beside = mma && own == OwnPositions::beside_prefix;
  const auto prefix = [&]<bool kBeside>() {
    if (type == DType::f16) {
      launch_prefix<__half, kBeside>(args, shared, suffix_splits, prefix_splits, stream);
    } else {
      launch_prefix<__nv_bfloat16, kBeside>(args, shared, suffix_splits, prefix_splits, stream);
    }
  };
  if (beside) {
    prefix.template operator()<true>();
    suffix_attention_mma(type, args, suffix_splits, stream, true);
  } else {
    if (mma) {
      suffix_attention_mma(type, args, suffix_splits, stream);
    } else {
      attention_partial(type, args, suffix_splits, stream);
    }
    prefix.template operator()<false>();
  }
  attention_merge(type, args, stream);
}

}  // namespace kernelllm::cuda
