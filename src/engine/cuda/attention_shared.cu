// Shared-prefix decode attention; see attention_shared.cuh. The prefix kernel: a block per
// (prefix split, KV head) taking the items in turn, 8 warps, warp w owning query rows
// [16w, 16w + 16) of the item (row = member * group + head). K and V tiles of 32 positions are
// loaded once into shared memory for all rows (the next tile's loads in flight meanwhile);
// S = Q.K^T and O += P.V on mma.sync m16n8k16 with fp32 accumulators, Q and P either rounded to
// the cache dtype once (FlashAttention's operands; the backend's choice, docs/cuda-engine.md)
// or split into a high and a low half in it (two products each, so the
// result matches the fp32 split kernel to about fp32 accuracy): SharedPrefixArgs::low_halves.
// Each row's (max, sum, unnormalized output) goes into the split slots after the suffix's, and
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
constexpr int kPad = 8;
constexpr int64_t kSharedItemBlocks = 2;  // blocks per (split, KV head), each taking every 2nd item

// K and V rows [tile, tile + kTile) below `end` of one KV head, 16 bytes per load, into
// registers (zero past `end`): issued one tile ahead so their latency overlaps the products.
template <class T, int HD>
struct TileLoader {
  static constexpr int kChunks = kTile * HD / 8;
  static constexpr int kPer = (kChunks + kThreads - 1) / kThreads;
  uint4 k[kPer], v[kPer];
  // evict_first: under `policy` (the rows are read once a pass).
  __device__ __forceinline__ void load(const AttentionArgs& a, const int32_t* table, int64_t g, int64_t tile,
                                       int64_t end, bool evict_first, uint64_t policy) {
    const T* pool = static_cast<const T*>(a.kv.pool);
    const int64_t kv_dim = a.kv.kv_dim, pt = a.kv.page_tokens;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = i * kThreads + static_cast<int>(threadIdx.x);
      const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
      const int64_t pos = tile + p;
      k[i] = v[i] = make_uint4(0, 0, 0, 0);
      if (c < kChunks && pos < end) {
        const T* kp =
            paged_k_row(pool, table, static_cast<int>(pos), static_cast<int>(pt), a.kv.layers, a.layer, kv_dim) +
            g * HD + d0;
        if (evict_first) {
          k[i] = load_stream(kp, true, policy);
          v[i] = load_stream(kp + pt * kv_dim, true, policy);
        } else {
          k[i] = *reinterpret_cast<const uint4*>(kp);
          v[i] = *reinterpret_cast<const uint4*>(kp + pt * kv_dim);
        }
      }
    }
  }
  __device__ __forceinline__ void store(T (*sK)[HD + kPad], T (*sV)[HD + kPad]) const {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = i * kThreads + static_cast<int>(threadIdx.x);
      if (c < kChunks) {
        const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
        *reinterpret_cast<uint4*>(&sK[p][d0]) = k[i];
        *reinterpret_cast<uint4*>(&sV[p][d0]) = v[i];
      }
    }
  }
};

// Tile `tile` of `tiles` of block b's share of pf (segments b, b + blocks, ...: a part of a row
// each), asked into L2 by threads `thread` of `threads` (a bulk request a segment, or its lines).
__device__ __forceinline__ void prefetch_share(const L2Prefetch& pf, int64_t b, int64_t blocks, int64_t tile,
                                               int64_t tiles, int thread, int threads) {
  const int64_t segs = pf.rows * pf.parts;
  const int64_t count = (segs - b + blocks - 1) / blocks;
  const auto* base = static_cast<const unsigned char*>(pf.base);
  for (int64_t k = count * tile / tiles + thread; k < count * (tile + 1) / tiles; k += threads) {
    const int64_t i = b + k * blocks;
    const unsigned char* seg = base + (i / pf.parts) * pf.row_bytes + (i % pf.parts) * pf.part_stride;
    if (pf.lines) {
      for (int line = 0; line < pf.bytes; line += 128) prefetch_l2(seg + line);
    } else {
      prefetch_l2_bulk(seg, pf.bytes);
    }
  }
}

// Grid: (prefix split, KV head, item stride); a block takes items blockIdx.z, + gridDim.z, ...
// up to the first unused one, so the grid stays small and fixed while the plan changes.
// kLow: Q and P as high and low halves in T (two products each, about fp32 accuracy); without it
// both are rounded to T once, the operands of FlashAttention's arithmetic (SharedPrefixArgs).
template <class T, int HD, bool kLow>
__global__ void __launch_bounds__(kThreads) prefix_kernel(AttentionArgs a, SharedPrefixArgs s, int suffix_splits) {
  constexpr int KS = HD / 16;  // k-steps over head dims
  constexpr int ND = HD / 8;   // output n-tiles
  constexpr int NB = kTile / 8;
  constexpr float kLn2 = 0.6931471805599453f;
  __shared__ __align__(16) T sK[kTile][HD + kPad];
  __shared__ __align__(16) T sV[kTile][HD + kPad];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int group = static_cast<int>(a.heads / a.kv_heads), heads = static_cast<int>(a.heads);
  const int64_t split = blockIdx.x, g = blockIdx.y;
  // An item's range in this split, its page-table row, and this thread's two query rows: gq
  // (r = 0) and gq + 8 (r = 1) of the warp's 16 (row = member * group + head).
  struct Item {
    int begin, end;
    const int32_t* table;
    int rows;
    bool row_ok[2];
    int head[2];  // token * heads + head
  };
  const auto plan_item = [&](int64_t item) {
    Item it;
    const int prefix = s.item_prefix[item];
    const int chunk = (prefix + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    it.begin = min(prefix, static_cast<int>(split) * chunk);
    it.end = min(prefix, it.begin + chunk);
    it.table = a.block_table + static_cast<int64_t>(s.item_seq[item]) * a.table_width;
    it.rows = s.item_count[item] * group;
    const int32_t* members = s.members + s.item_first[item];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + gq + r * 8;
      it.row_ok[r] = row < it.rows;
      it.head[r] = (it.row_ok[r] ? members[row / group] : 0) * heads + static_cast<int>(g) * group + row % group;
    }
    return it;
  };
  // The plan is uploaded before the pass and shared pages are never written after the fork: the
  // first item's plan and its first K and V tile are loaded (the rest of its rows fetched into
  // L2) while the previous kernel still runs. Only the queries wait.
  TileLoader<T, HD> next;
  const bool ef = s.kv_evict_first;
  const uint64_t policy = ef ? evict_first_policy() : 0;
  Item it{};
  const bool first = blockIdx.z < a.n_tokens && s.item_count[blockIdx.z] > 0;
  if (first) {
    it = plan_item(blockIdx.z);
    prefetch_kv_rows(static_cast<const T*>(a.kv.pool), it.table, it.begin, it.end,
                     static_cast<int>(a.kv.page_tokens), a.kv.layers, a.layer, a.kv.kv_dim, g * HD, HD,
                     static_cast<int>(threadIdx.x), kThreads);
    next.load(a, it.table, g, it.begin, it.end, ef, policy);
  }
  wait_for_predecessor();
  const float scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;

  for (int64_t item = blockIdx.z; item < a.n_tokens && first; item += gridDim.z) {
    if (item != blockIdx.z) {
      if (s.item_count[item] == 0) break;  // items are packed: the rest are unused
      it = plan_item(item);
      next.load(a, it.table, g, it.begin, it.end, ef, policy);
    }
    const int64_t begin = it.begin, end = it.end;
    if (begin >= end) {  // nothing here: empty statistics, which the merge skips
      for (int row = static_cast<int>(threadIdx.x); row < it.rows; row += kThreads) {
        const int64_t member = s.members[s.item_first[item] + row / group];
        const int64_t slot = (member * heads + g * group + row % group) * a.splits + suffix_splits + split;
        a.partial_ml[slot * 2] = -FLT_MAX;
        a.partial_ml[slot * 2 + 1] = 0.0f;
      }
      continue;
    }
    const int32_t* table = it.table;
    const bool active = warp * 16 < it.rows;
    uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = j & 1;
        const int col = ks * 16 + 2 * tq + (j >> 1) * 8;
        float x0 = 0.0f, x1 = 0.0f;
        if (it.row_ok[r]) {
          const float2 q = *reinterpret_cast<const float2*>(a.q + static_cast<int64_t>(it.head[r]) * HD + col);
          x0 = q.x;
          x1 = q.y;
        }
        split2<T>(x0, x1, qh[ks][j], ql[ks][j]);
      }
    }
    float o[ND][4];
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int64_t tile = begin; tile < end; tile += kTile) {
      __syncthreads();  // the previous tile (or item) is done with sK / sV
      next.store(sK, sV);
      __syncthreads();
      if (tile + kTile < end) next.load(a, table, g, tile + kTile, end, ef, policy);
      if (!active) {
        // Idle warps: a share of the next weights into L2 (the first item, so blocks of z 0).
        if (s.next_weights.base != nullptr && item == 0) {
          const int idle_from = (it.rows + 15) / 16 * 32;
          prefetch_share(s.next_weights, static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x,
                         static_cast<int64_t>(gridDim.x) * gridDim.y, (tile - begin) / kTile,
                         (end - begin + kTile - 1) / kTile, static_cast<int>(threadIdx.x) - idle_from,
                         kThreads - idle_from);
        }
        continue;
      }

      float sc[NB][4];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&sK[nb * 8 + gq][ks * 16 + 2 * tq]);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&sK[nb * 8 + gq][ks * 16 + 2 * tq + 8]);
          mma<T>(sc[nb], qh[ks], b0, b1);
          if constexpr (kLow) mma<T>(sc[nb], ql[ks], b0, b1);
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
      softmax_tile(sc, row_max, m, l, o);
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
          if constexpr (kLow) mma<T>(o[nd], pl, b[0], b[1]);
          mma<T>(o[nd + 1], ph, b[2], b[3]);
          if constexpr (kLow) mma<T>(o[nd + 1], pl, b[2], b[3]);
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
      if (!it.row_ok[r]) continue;
      const int64_t slot = static_cast<int64_t>(it.head[r]) * a.splits + suffix_splits + split;
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
}

template <class T, bool kLow>
void launch_prefix(const AttentionArgs& a, const SharedPrefixArgs& s, int64_t suffix_splits, int64_t prefix_splits,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(prefix_splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(std::min(kSharedItemBlocks, a.n_tokens)));
  const int ss = static_cast<int>(suffix_splits);
  switch (a.head_dim) {
    case 16: launch_kernel(prefix_kernel<T, 16, kLow>, grid, kThreads, 0, stream, a, s, ss); break;
    case 32: launch_kernel(prefix_kernel<T, 32, kLow>, grid, kThreads, 0, stream, a, s, ss); break;
    case 64: launch_kernel(prefix_kernel<T, 64, kLow>, grid, kThreads, 0, stream, a, s, ss); break;
    default: launch_kernel(prefix_kernel<T, 128, kLow>, grid, kThreads, 0, stream, a, s, ss); break;
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

void shared_prefix_attention(DType type, const AttentionArgs& args, const SharedPrefixArgs& shared,
                             int64_t suffix_splits, int64_t prefix_splits, cudaStream_t stream, bool mma_suffix) {
  if (args.n_tokens == 0) return;
  if (mma_suffix && suffix_mma_supported(type, args.head_dim, args.heads / args.kv_heads)) {
    suffix_attention_mma(type, args, suffix_splits, stream);
  } else {
    attention_partial(type, args, suffix_splits, stream);
  }
  const bool low = shared.low_halves;
  if (type == DType::f16) {
    (low ? launch_prefix<__half, true> : launch_prefix<__half, false>)(args, shared, suffix_splits, prefix_splits,
                                                                        stream);
  } else {
    (low ? launch_prefix<__nv_bfloat16, true> : launch_prefix<__nv_bfloat16, false>)(args, shared, suffix_splits,
                                                                                      prefix_splits, stream);
  }
  attention_merge(type, args, stream);
}

}  // namespace kernelllm::cuda
