// The cascade pass's own positions on the tensor cores; see attention_shared.cuh. A block per
// (token, KV head, split), 4 warps, each taking 16 positions of the split at a time.
//
// Scores as S^T = K . Q^T (mma.sync m16n8k16): the step's 16 positions are the rows of A, so the
// K rows go from global memory straight into A-operand registers, and the 8 columns of B are the
// group's query heads twice: columns 0..3 the heads' queries rounded to the cache dtype (high
// half), columns 4..7 what that rounding lost (low half). One product per k-step gives both; a
// shuffle adds the halves, so the scores match fp32 queries to about fp32 accuracy. The
// contraction index is free to permute: lane (gq, tq) loads head dims [tq * HD/4, + HD/4) of
// positions gq and gq + 8 as whole 16-byte chunks, and its query columns over the same dims.
//
// Outputs as O^T = V^T . P^T: the A operand's rows are head dims (lane gq's are [gq * HD/8,
// + HD/8), two per m-tile), its k index the positions, paired as (tq, tq + 8) and (tq + 4,
// tq + 12) so that one byte permute of two loaded V words gives each register; B's columns are
// again the heads' weights in high and low halves, each register a pair of positions that one
// lane of the score layout holds, fetched by shuffles. The high and low outputs are added once,
// after the loop. Writes the same split slots as the split kernel (attention.cuh).
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/attention_split.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStep = 16;       // positions a warp takes at a time
constexpr int kMaxGroup = static_cast<int>(kSuffixMaxGroup);  // query heads per KV head: columns 0..3 high, 4..7 low
constexpr int kMinBlocks = 3;   // blocks per SM the registers are held to
constexpr int kTmaPageRows = kStep;  // the TMA form's page: one step of a warp
constexpr int kRing = 8;             // its pages in flight per block (a multiple of kWarps)
static_assert(kRing % kWarps == 0, "a slot's pages belong to one warp");

// The packed pair (x0, x1) rounded to T (high half) or what that rounding lost (low half).
template <class T>
__device__ __forceinline__ uint32_t half_pair(float x0, float x1, bool low) {
  uint32_t hi, lo;
  split2<T>(x0, x1, hi, lo);
  return low ? lo : hi;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One lane's share of a warp's work for (token, KV head): the query fragments, the running
// (max, sum) of its two head columns and its O^T accumulators; step() takes the warp's next 16
// positions from K and V words already loaded (either kernel's loads), finish() leaves the
// warp's (max, sum, output) in shared memory for store_split_slots.
template <class T, int HD>
struct OwnLane {
  static constexpr int KS = HD / 16;  // k-steps of S^T, and m-tiles of O^T
  static constexpr int QD = HD / 4;   // K dims per quad lane (tq)
  static constexpr int KC = QD / 8;   // its 16-byte chunks per position
  static constexpr int VD = HD / 8;   // V dims per row lane (gq)
  static constexpr int VC = VD / 8;   // its 16-byte chunks per position
  static_assert(KC >= 1 && VC >= 1, "head_dim 64 or 128");

  int gq, tq;
  uint32_t qb[KS][2];
  float o[KS][4];
  float m[2], l[2];
  int src0, src1;
  bool odd_head;
  float scale_log2;

  // B operand of S^T: column gq is query head gq % 4 of the group (zero past it), its high half
  // for gq < 4 and its low half after; k-step ks takes dims tq * QD + 4ks + {0, 1} (b0) and
  // + {2, 3} (b1), the dims of the K words this lane loads. q is the previous kernel's output.
  __device__ __forceinline__ void init(const AttentionArgs& a, int t, int g, int group, int lane) {
    gq = lane / 4;
    tq = lane % 4;
    scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;
    {
      const int head = gq % kMaxGroup;
      const bool low = gq >= kMaxGroup, ok = head < group;
      const float* qrow =
          a.q + (static_cast<int64_t>(t) * a.heads + static_cast<int64_t>(g) * group + (ok ? head : 0)) * HD + tq * QD;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const float4 q = ok ? *reinterpret_cast<const float4*>(qrow + 4 * ks) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qb[ks][0] = half_pair<T>(q.x, q.y, low);
        qb[ks][1] = half_pair<T>(q.z, q.w, low);
      }
    }
    // This lane's columns 2tq, 2tq + 1 are heads 2 * (tq % 2) + {0, 1} (high half for tq < 2):
    // their running max (log2 units) and this lane's share of their sums.
#pragma unroll
    for (int mt = 0; mt < KS; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
    // Lanes holding this lane's B operand of O^T: positions (tq, tq + 8) and (tq + 4, tq + 12) of
    // column gq's head pair and half.
    const int src_col = (gq % kMaxGroup) / 2 + 2 * (gq / kMaxGroup);
    src0 = tq * 4 + src_col;
    src1 = (tq + 4) * 4 + src_col;
    odd_head = (gq % 2) != 0;
  }

  // Positions base .. base + 15, of which those in [lo, end) count (at least one does): kr[r] the
  // K words of position base + gq + 8r, vr the V words of positions base + tq, + 8, + 4, + 12
  // (zero where out of range: their weights are 0, but 0 times a stale NaN would not be).
  __device__ __forceinline__ void step(const uint4 (&kr)[2][KC], const uint4 (&vr)[4][VC], int base, int lo,
                                       int end) {
    // S^T: even and odd k-steps in two accumulators (shorter chains).
    float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const uint4& k0 = kr[0][ks / 2];
      const uint4& k1 = kr[1][ks / 2];
      const uint32_t af[4] = {ks % 2 == 0 ? k0.x : k0.z, ks % 2 == 0 ? k1.x : k1.z, ks % 2 == 0 ? k0.y : k0.w,
                              ks % 2 == 0 ? k1.y : k1.w};
      mma<T>(ks % 2 == 0 ? sa : sb, af, qb[ks][0], qb[ks][1]);
    }
    // s[e]: position gq (e < 2) or gq + 8, head 2 * (tq % 2) + e % 2, both halves added.
    float s[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[e] = sa[e] + sb[e];
      s[e] += __shfl_xor_sync(0xffffffffu, s[e], 2);
      const int p = base + gq + (e >= 2 ? 8 : 0);
      s[e] = p >= lo && p < end ? s[e] * scale_log2 : -INFINITY;
    }
    float corr[2];
    uint32_t pv[2];  // the pair (position gq, gq + 8) of head 2 * (tq % 2) + hh, this lane's half
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = fmaxf(s[hh], s[2 + hh]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[hh], mx);  // finite: a position of the step is in range
      corr[hh] = exp2f(m[hh] - m_new);
      m[hh] = m_new;
      const float p0 = exp2f(s[hh] - m_new), p1 = exp2f(s[2 + hh] - m_new);
      l[hh] = l[hh] * corr[hh] + p0 + p1;
      pv[hh] = half_pair<T>(p0, p1, tq >= 2);
    }
    uint32_t pb[2];
    {
      const uint32_t x0 = __shfl_sync(0xffffffffu, pv[0], src0), x1 = __shfl_sync(0xffffffffu, pv[1], src0);
      const uint32_t y0 = __shfl_sync(0xffffffffu, pv[0], src1), y1 = __shfl_sync(0xffffffffu, pv[1], src1);
      pb[0] = odd_head ? x1 : x0;
      pb[1] = odd_head ? y1 : y0;
    }
#pragma unroll
    for (int mt = 0; mt < KS; ++mt) {
      const int c = mt / 4, w = mt % 4;
      const uint32_t v0 = word(vr[0][c], w), v8 = word(vr[1][c], w), v4 = word(vr[2][c], w), v12 = word(vr[3][c], w);
      const uint32_t af[4] = {__byte_perm(v0, v8, 0x5410), __byte_perm(v0, v8, 0x7632), __byte_perm(v4, v12, 0x5410),
                              __byte_perm(v4, v12, 0x7632)};
      o[mt][0] *= corr[0];
      o[mt][1] *= corr[1];
      o[mt][2] *= corr[0];
      o[mt][3] *= corr[1];
      mma<T>(o[mt], af, pb[0], pb[1]);
    }
  }

  // High and low halves of the outputs, the sums over the positions of all lanes, and the
  // warp's (max, sum, output) per head into s_ml[warp] / s_o[warp]. Lane (gq, tq < 2) holds heads
  // 2tq + {0, 1}, dims gq * VD + 2mt (o[mt][0..1]) and + 1 (o[mt][2..3]).
  __device__ __forceinline__ void finish(int warp, float (*s_ml)[kMaxGroup][2], float (*s_o)[kMaxGroup][HD]) {
#pragma unroll
    for (int mt = 0; mt < KS; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][e] += __shfl_xor_sync(0xffffffffu, o[mt][e], 2);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 4);
      l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 8);
      l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 16);
    }
    if (tq < 2) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        if (gq == 0) {
          s_ml[warp][2 * tq + hh][0] = m[hh];
          s_ml[warp][2 * tq + hh][1] = l[hh];
        }
#pragma unroll
        for (int mt = 0; mt < KS; ++mt) {
          s_o[warp][2 * tq + hh][gq * VD + 2 * mt] = o[mt][hh];
          s_o[warp][2 * tq + hh][gq * VD + 2 * mt + 1] = o[mt][2 + hh];
        }
      }
    }
  }
};

// Row (position - base) of the V words vr[r] a lane loads: tq, tq + 8, tq + 4, tq + 12 (the pairs
// O^T's A operand takes).
__device__ __forceinline__ int v_row(int tq, int r) { return tq + (r == 1 ? 8 : r == 2 ? 4 : r == 3 ? 12 : 0); }

// Loads from global memory: a block per (token, KV head, split) of the split kernel's ranges;
// warp w takes positions begin + 16w, + 64, ... straight into registers.
template <class T, int HD>
__global__ void __launch_bounds__(kThreads, kMinBlocks) suffix_kernel(AttentionArgs a) {
  using Lane = OwnLane<T, HD>;
  const int t = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int group = static_cast<int>(a.heads / a.kv_heads);
  const int64_t kv_dim = a.kv.kv_dim;
  // As in the split kernel: the rows into L2 before the PDL wait, empty splits' statistics.
  const auto [n_ctx, begin, end, table, slot0] = enter_split<T>(a, t, g, split, HD, kThreads);
  if (begin >= end) return;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const int pt = static_cast<int>(a.kv.page_tokens);
  Lane ln;
  ln.init(a, t, g, group, lane);
  const int64_t v_off = static_cast<int64_t>(pt) * kv_dim;
  for (int base = begin + warp * kStep; base < end; base += kWarps * kStep) {
    uint4 kr[2][Lane::KC], vr[4][Lane::VC];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int p = base + ln.gq + 8 * r;
      const T* kp = paged_k_row(pool, table, p < end ? p : begin, pt, a.kv.layers, a.layer, kv_dim) +
                    static_cast<int64_t>(g) * HD + ln.tq * Lane::QD;
#pragma unroll
      for (int c = 0; c < Lane::KC; ++c) kr[r][c] = __ldg(reinterpret_cast<const uint4*>(kp + c * 8));
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int p = base + v_row(ln.tq, r);
      const T* vp = paged_k_row(pool, table, p < end ? p : begin, pt, a.kv.layers, a.layer, kv_dim) + v_off +
                    static_cast<int64_t>(g) * HD + ln.gq * Lane::VD;
#pragma unroll
      for (int c = 0; c < Lane::VC; ++c) {
        vr[r][c] = p < end ? __ldg(reinterpret_cast<const uint4*>(vp + c * 8)) : make_uint4(0, 0, 0, 0);
      }
    }
    ln.step(kr, vr, base, begin, end);
  }
  __shared__ float s_ml[kWarps][kMaxGroup][2];
  __shared__ __align__(16) float s_o[kWarps][kMaxGroup][HD];
  ln.finish(warp, s_ml, s_o);
  __syncthreads();
  store_split_slots<kWarps, kMaxGroup, HD, true>(a, slot0, group, HD, s_ml, s_o);
}

// Bytes of one ring slot: a page's K rows and V rows of one KV head, in boxes of 64 dims x 16
// rows (128-byte swizzled, tma.cuh).
template <int HD>
constexpr int kTmaSlotBytes = 2 * (HD / kTmaBoxCols) * kTmaPageRows * 128;

// Token t's own positions [first, n_ctx) by pages (kTmaPageRows positions; pl holds the token's
// own position) and split `split`'s share of them, pages [pb, pe): the pages split evenly over
// gridDim.z, at least min_split_positions' worth each (the last splits may get none).
struct OwnPages {
  int n_ctx, first, pl, pb, pe;
};
__device__ __forceinline__ OwnPages own_pages(const AttentionArgs& a, int t, int split) {
  OwnPages o;
  o.n_ctx = a.pos[t] + 1;
  o.first = a.ctx_begin != nullptr ? a.ctx_begin[t] : 0;
  const int pf = o.first / kTmaPageRows;
  o.pl = (o.n_ctx - 1) / kTmaPageRows;  // n_ctx > first
  const int z = static_cast<int>(gridDim.z);
  const int even = (o.pl - pf + 1 + z - 1) / z;
  const int floor_pages = static_cast<int>((a.min_split_positions + kTmaPageRows - 1) / kTmaPageRows);
  const int chunk = even > floor_pages ? even : floor_pages;
  o.pb = pf + split * chunk;
  o.pe = min(o.pb + chunk, o.pl + 1);
  return o;
}

// Loads by the TMA: the own pages (16 positions each, page-aligned since ctx_begin is) split
// evenly over gridDim.z; a block's pages go through a ring of kRing slots, warp w taking pages
// w, w + 4, ... (slot j % kRing, refilled with page j + kRing once the warp has read it). The
// pages before the token's are asked for before the PDL wait (earlier passes wrote them), the
// token's own page after it; pages past the ring's first fill are asked into L2 before the wait.
template <class T, int HD>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    suffix_tma_kernel(const __grid_constant__ AttentionArgs a, const __grid_constant__ CUtensorMap map) {
  using Lane = OwnLane<T, HD>;
  constexpr int kBoxes = HD / kTmaBoxCols;
  constexpr int kSlot = kTmaSlotBytes<HD>;
  constexpr int kBoxBytes = kTmaPageRows * 128;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* ring = align_1024(smem_raw);
  __shared__ uint64_t bars[kRing];
  const int t = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int group = static_cast<int>(a.heads / a.kv_heads);
  const auto [n_ctx, first, pl, pb, pe] = own_pages(a, t, split);
  const int n = pe - pb;  // this block's pages
  const int32_t* table = a.block_table + static_cast<int64_t>(a.seq[t]) * a.table_width;
  const int64_t layer_row = a.layer * 2 * kTmaPageRows;
  auto issue = [&](int j, int64_t page) {  // page pb + j (physical `page`) into slot j % kRing
    uint64_t* bar = &bars[j % kRing];
    unsigned char* dst = ring + (j % kRing) * kSlot;
    const auto row = static_cast<int>(page * a.kv.layers * 2 * kTmaPageRows + layer_row);
    mbar_expect_tx(bar, kSlot);
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      tma_box_once(dst + b * kBoxBytes, &map, g * HD + b * kTmaBoxCols, row, bar, a.kv_evict_first);
      tma_box_once(dst + (kBoxes + b) * kBoxBytes, &map, g * HD + b * kTmaBoxCols, row + kTmaPageRows, bar,
                   a.kv_evict_first);
    }
  };
  // The first fill by warp 0, lane j asking for page pb + j (its page-table entries read side by
  // side, not one round trip after another).
  int64_t first_page = 0;
  if (n > 0) {
    if (warp == 0) {
      if (lane == 0) {
        for (int s = 0; s < kRing; ++s) mbar_init(&bars[s], 1);
        mbar_init_fence();
      }
      __syncwarp();
      if (lane < n && lane < kRing) {
        first_page = table[pb + lane];
        if (pb + lane < pl) issue(lane, first_page);
      }
    }
    if (n > kRing) {
      const int64_t lo = static_cast<int64_t>(pb + kRing) * kTmaPageRows;
      const int64_t hi = min(static_cast<int64_t>(pe) * kTmaPageRows, static_cast<int64_t>(pl) * kTmaPageRows);
      if (hi > lo) {
        prefetch_kv_rows(static_cast<const T*>(a.kv.pool), table, lo, hi, kTmaPageRows, a.kv.layers, a.layer,
                         a.kv.kv_dim, static_cast<int64_t>(g) * HD, HD, static_cast<int>(threadIdx.x), kThreads);
      }
    }
  }
  __syncthreads();
  wait_for_predecessor();
  const int64_t slot0 = split_slot0(a, t, g, split);
  if (n <= 0) {
    write_empty_split(a, slot0);
    return;
  }
  if (warp == 0 && lane == pl - pb && pl < pe && lane < kRing) issue(lane, first_page);  // the token's page
  const int begin = max(first, pb * kTmaPageRows), end = min(n_ctx, pe * kTmaPageRows);
  Lane ln;
  ln.init(a, t, g, group, lane);
  for (int j = warp; j < n; j += kWarps) {
    const int slot = j % kRing;
    const bool refill = lane == 0 && j + kRing < n;
    const int64_t next_page = refill ? table[pb + j + kRing] : 0;  // read while the page is used
    mbar_wait(&bars[slot], static_cast<unsigned>((j / kRing) & 1));
    const auto* ks = reinterpret_cast<const T*>(ring + slot * kSlot);
    const T* vs = ks + kBoxes * kBoxBytes / static_cast<int>(sizeof(T));
    const int base = (pb + j) * kTmaPageRows;
    // Dims d .. d + 7 of row r: box d / 64, swizzled chunk (d % 64) / 8 (tma.cuh).
    const auto chunk = [](const T* rows, int r, int d) {
      return *reinterpret_cast<const uint4*>(rows + (d / kTmaBoxCols) * kBoxBytes / static_cast<int>(sizeof(T)) +
                                             swizzled_elem(r, (d % kTmaBoxCols) / 8));
    };
    uint4 kr[2][Lane::KC], vr[4][Lane::VC];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int c = 0; c < Lane::KC; ++c) kr[r][c] = chunk(ks, ln.gq + 8 * r, ln.tq * Lane::QD + c * 8);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = v_row(ln.tq, r), p = base + row;
      const bool in = p >= begin && p < end;
#pragma unroll
      for (int c = 0; c < Lane::VC; ++c) {
        const uint4 v = chunk(vs, row, ln.gq * Lane::VD + c * 8);
        vr[r][c] = in ? v : make_uint4(0, 0, 0, 0);
      }
    }
    ln.step(kr, vr, base, begin, end);
    __syncwarp();
    if (refill) {
      async_proxy_fence();
      issue(j + kRing, next_page);
    }
  }
  __syncthreads();  // every page read: the ring's bytes hold the warps' statistics from here on
  auto s_o = reinterpret_cast<float (*)[kMaxGroup][HD]>(ring);
  auto s_ml = reinterpret_cast<float (*)[kMaxGroup][2]>(ring + kWarps * kMaxGroup * HD * sizeof(float));
  ln.finish(warp, s_ml, s_o);
  __syncthreads();
  store_split_slots<kWarps, kMaxGroup, HD, true>(a, slot0, group, HD, s_ml, s_o);
}

}  // namespace

bool suffix_tma_serves(DType type, const AttentionArgs& args) {
  return suffix_mma_supported(type, args.head_dim, args.heads / args.kv_heads) && args.kv.pages > 0 &&
         args.kv.page_tokens == kTmaPageRows;
}

namespace {

template <class T, int HD>
void launch_suffix(const AttentionArgs& args, int64_t splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.n_tokens), static_cast<unsigned>(args.kv_heads),
                  static_cast<unsigned>(splits));
  constexpr DType type = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  CUtensorMap map;
  if (suffix_tma_serves(type, args) && tma_map_2d(map, type, args.kv.pool, args.kv.pages * args.kv.layers * 2 * kTmaPageRows,
                                                  args.kv.kv_dim, kTmaPageRows)) {
    constexpr size_t smem = static_cast<size_t>(kRing) * kTmaSlotBytes<HD> + 1024;
    allow_dynamic_smem<suffix_tma_kernel<T, HD>>(smem);
    launch_kernel(suffix_tma_kernel<T, HD>, grid, kThreads, smem, stream, args, map);
  } else {
    launch_kernel(suffix_kernel<T, HD>, grid, kThreads, 0, stream, args);
  }
}

}  // namespace

void suffix_attention_mma(DType type, const AttentionArgs& args, int64_t splits, cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  const bool wide = args.head_dim == 128;
  if (type == DType::f16) {
    wide ? launch_suffix<__half, 128>(args, splits, stream) : launch_suffix<__half, 64>(args, splits, stream);
  } else {
    wide ? launch_suffix<__nv_bfloat16, 128>(args, splits, stream)
         : launch_suffix<__nv_bfloat16, 64>(args, splits, stream);
  }
}

}  // namespace kernelllm::cuda
