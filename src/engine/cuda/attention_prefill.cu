// Prefill attention on the tensor cores (bf16/f16 caches), flash-attention style, in two forms
// that share the tile copies and the online softmax.
//
// Row tiles (prefill_kernel): a block serves one query block (up to kPrefillQueryBlock
// consecutive tokens of one sequence) for one KV head: warp w takes query head w % group of that
// KV head and rows [16 m, 16 m + 16) of the block, m = blockIdx.z * MT + w / group, so the K/V
// tiles in shared memory serve group x 16 x MT query rows.
//
// Head rows (prefill_head_kernel): a block of `group` warps serves the same query block and KV
// head, warp w taking query head w and all 32 rows of the block as two 16-row tiles, so every
// K/V fragment read from shared memory feeds two products instead of one. The queries wait in
// shared memory, rounded to the cache dtype (two tiles' fragments in registers would leave no
// room for a 64-position score tile), and two 4-warp blocks fit an SM, each on its own tile loop.
//
// Both: K and V tiles of 64 positions are copied with cp.async into two buffers (the next tile's
// copy in flight while this one is used) in their cache layout, [position][dim]: ldmatrix gives
// the B operands of S = Q.K^T directly and, transposed, those of O += P.V. The softmax is online
// in fp32 registers; P is rounded to the cache dtype for the second product. The two forms do
// the same products in the same order, so their outputs are equal bit for bit. Query blocks run
// longest context first (blockIdx.x counts from the last block) so the causal triangle's heavy
// blocks do not form the tail.
#include <cfloat>
#include <cstdint>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kTile = 64;  // positions per K/V tile
constexpr int kPad = 8;    // row padding: rows 16 bytes apart modulo 128, so ldmatrix is conflict-free
constexpr int kHeadRows = static_cast<int>(kPrefillQueryBlock);  // a head-rows warp's rows (two 16-row tiles)
static_assert(kHeadRows == 32, "the head-rows form gives a warp two 16-row tiles");

template <class T, int HD>
using KvRow = T[HD + kPad];

// Shared memory of either form: {K, V} x 2 buffers x kTile rows, then the head-rows form's
// queries (q_rows rows); 2-byte elements.
template <int HD>
constexpr size_t smem_bytes(int q_rows) {
  return (size_t{2} * 2 * kTile + static_cast<size_t>(q_rows)) * (HD + kPad) * 2;
}
static_assert(smem_bytes<128>(4 * kHeadRows) == prefill_smem_bytes(PrefillKernel::head_rows, 128, 4) &&
                  smem_bytes<64>(0) == prefill_smem_bytes(PrefillKernel::row_tiles2, 64, 4),
              "shapes.h's prefill_smem_bytes describes this layout");

// What both forms need of a query block and its sequence's cache.
template <class T>
struct BlockKv {
  const T* pool;
  const int32_t* table;  // the sequence's page-table row
  int page_tokens;
  int64_t layers, layer, kv_dim, head_offset;  // head_offset: this KV head's first element in a row
};

// Copies the K/V tile of kTile positions from `tile` (rows past max_pos zero-filled, not read)
// into buffer `buf` of sK / sV, by the block's `threads` threads, as one cp.async group.
template <class T, int HD>
__device__ __forceinline__ void load_kv_tile(const BlockKv<T>& kv, KvRow<T, HD>* sK, KvRow<T, HD>* sV,
                                             int64_t tile, int64_t max_pos, int buf, int threads) {
  constexpr int kChunks = kTile * HD / 8;
  for (int c = static_cast<int>(threadIdx.x); c < kChunks; c += threads) {
    const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
    const int64_t pos = tile + p;
    const bool ok = pos <= max_pos;
    const T* kp = ok ? paged_k_row(kv.pool, kv.table, static_cast<int>(pos), kv.page_tokens, kv.layers, kv.layer,
                                   kv.kv_dim) + kv.head_offset + d0
                     : kv.pool;
    cp_async16(&sK[buf * kTile + p][d0], kp, ok);
    cp_async16(&sV[buf * kTile + p][d0], ok ? kp + kv.page_tokens * kv.kv_dim : kv.pool, ok);
  }
  cp_async_commit();
}

// 2^x by one MUFU instruction; exp2f adds a range fix-up around it for results below 2^-126,
// weights far too small to matter beside a row's largest (which is 1).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One 16-row tile's scores of a K/V tile (raw products in, weights out) and the online-softmax
// step over them; this thread holds rows gq (r = 0) and gq + 8 (r = 1), whose 4 threads tq = 0..3
// hold the tile's columns. The causal mask (-inf past each row's position, min_pos + row) only
// where the tile reaches past the tile's first row; the running maximum m is in base-2 units
// (scores times scale_log2), and each weight is exp2(s * scale_log2 - m) by one fused
// multiply-add. The output accumulators o and the running sums l are rescaled only where some
// row's maximum grew in this tile (a factor of exactly 1 otherwise), the choice made for the
// whole warp.
template <int NB, int ND>
__device__ __forceinline__ void scores_to_weights(float (&s)[NB][4], int64_t tile, int64_t min_pos, int gq, int tq,
                                                  float scale_log2, float (&m)[2], float (&l)[2], float (&o)[ND][4]) {
  if (tile + NB * 8 - 1 > min_pos) {
    // Position tile + j is past row i's where j - i > min_pos - tile (32 bits: positions < 2^31).
    const int lead = static_cast<int>(min_pos - tile) + gq - 2 * tq;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (nb * 8 + (e & 1) > lead + (e >> 1) * 8) s[nb][e] = -INFINITY;
      }
    }
  }
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) row_max[e >> 1] = fmaxf(row_max[e >> 1], s[nb][e]);
  }
  float neg_base[2], corr[2];
  bool grew = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    const float m_new = fmaxf(m[r], row_max[r] * scale_log2);
    neg_base[r] = m_new == -INFINITY ? 0.0f : -m_new;
    grew |= m_new != m[r];
    corr[r] = exp2_ftz(m[r] + neg_base[r]);
    m[r] = m_new;
  }
  if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] *= corr[r];
    rescale_rows(o, corr);
  }
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[nb][e] = exp2_ftz(fmaf(s[nb][e], scale_log2, neg_base[e >> 1]));
      l[e >> 1] += s[nb][e];
    }
  }
}

// P's A fragment for positions [16 k2, 16 k2 + 16) of the tile, from the weights in s.
template <class T, int NB>
__device__ __forceinline__ void weights_fragment(const float (&s)[NB][4], int k2, uint32_t (&pa)[4]) {
  pa[0] = pack2<T>(s[2 * k2][0], s[2 * k2][1]);
  pa[1] = pack2<T>(s[2 * k2][2], s[2 * k2][3]);
  pa[2] = pack2<T>(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
  pa[3] = pack2<T>(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
}

// One 16-row tile's output: the row sums completed over the 4 threads of a row, then rows
// first_row + gq and + 8 (those below len) of query head h written normalized.
template <class T, int HD>
__device__ __forceinline__ void write_rows(const AttentionArgs& a, int64_t start, int64_t len, int64_t first_row,
                                           int64_t h, int gq, int tq, float (&l)[2], const float (&o)[HD / 8][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = first_row + gq + r * 8;
    if (row >= len) continue;
    const float inv = 1.0f / l[r];
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + (start + row) * a.heads * HD + h * HD + 2 * tq);
#pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) dst[nd * 4] = pack2<T>(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv);
  }
}

template <class T>
__device__ __forceinline__ BlockKv<T> block_kv(const AttentionArgs& a, int64_t start, int64_t g, int hd) {
  return {static_cast<const T*>(a.kv.pool), a.block_table + static_cast<int64_t>(a.seq[start]) * a.table_width,
          static_cast<int>(a.kv.page_tokens), a.kv.layers, a.layer, a.kv.kv_dim, g * hd};
}

__device__ __forceinline__ float scale_log2_for(int hd) {
  return rsqrtf(static_cast<float>(hd)) * 1.4426950408889634f;
}

template <class T, int HD, int MT>
__global__ void prefill_kernel(AttentionArgs a) {
  constexpr int KS = HD / 16;     // k-steps over head dims
  constexpr int ND = HD / 8;      // output n-tiles
  constexpr int NB = kTile / 8;   // score n-tiles per K/V tile
  using Row = KvRow<T, HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  Row* sK = reinterpret_cast<Row*>(smem);  // [2 * kTile]: buffer b is rows [b * kTile, (b + 1) * kTile)
  Row* sV = sK + 2 * kTile;
  wait_for_predecessor();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int group = static_cast<int>(a.heads / a.kv_heads);
  const int64_t g = blockIdx.y, h = g * group + warp % group;
  const int64_t qb = gridDim.x - 1 - blockIdx.x;
  const int64_t start = a.q_block_start[qb], len = a.q_block_len[qb];
  const int64_t first_row = static_cast<int64_t>(blockIdx.z) * MT * 16;
  if (first_row >= len) return;  // the whole block is past this query block's tokens
  const int64_t row0 = first_row + (warp / group) * 16;
  const int64_t pos0 = a.pos[start];
  const int64_t block_max_pos = pos0 + min(len, first_row + MT * 16) - 1;
  const bool warp_rows = row0 < len;
  const int64_t warp_min_pos = pos0 + row0, warp_max_pos = pos0 + min(len, row0 + 16) - 1;
  const BlockKv<T> kv = block_kv<T>(a, start, g, HD);
  const float scale_log2 = scale_log2_for(HD);
  auto load_tile = [&](int64_t tile, int buf) {
    load_kv_tile<T, HD>(kv, sK, sV, tile, block_max_pos, buf, static_cast<int>(blockDim.x));
  };
  const int64_t n_tiles = block_max_pos / kTile + 1;
  load_tile(0, 0);

  // This thread's Q fragments: rows row0 + gq and row0 + gq + 8 (zero past the block).
  uint32_t qf[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + gq + (j & 1) * 8;
      const int col = ks * 16 + 2 * tq + (j >> 1) * 8;
      float x0 = 0.0f, x1 = 0.0f;
      if (row < len) {
        const float2 v = *reinterpret_cast<const float2*>(a.q + (start + row) * a.heads * HD + h * HD + col);
        x0 = v.x;
        x1 = v.y;
      }
      qf[ks][j] = pack2<T>(x0, x1);
    }
  }
  float o[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    if (it + 1 < n_tiles) {
      load_tile((it + 1) * kTile, buf ^ 1);
    } else {
      cp_async_commit();  // an empty group, so "all but the newest" is always this tile
    }
    cp_async_wait<1>();
    __syncthreads();
    const int64_t tile = it * kTile;
    if (warp_rows && tile <= warp_max_pos) {
      const Row* k_rows = sK + buf * kTile;
      const Row* v_rows = sV + buf * kTile;
      // S = Q.K^T, head dims outer and score tiles inner: consecutive products are independent.
      float s[NB][4];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks + 1 < KS; ks += 2) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          uint32_t b[4];
          ldmatrix_x4(b, k_rows[nb * 8 + lane % 8] + ks * 16 + (lane / 8) * 8);
          mma<T>(s[nb], qf[ks], b[0], b[1]);
          mma<T>(s[nb], qf[ks + 1], b[2], b[3]);
        }
      }
      if constexpr (KS % 2 == 1) {
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          uint32_t b[2];
          ldmatrix_x2(b, k_rows[nb * 8 + lane % 8] + (KS - 1) * 16 + ((lane / 8) % 2) * 8);
          mma<T>(s[nb], qf[KS - 1], b[0], b[1]);
        }
      }
      // Scale, causal mask, online softmax; this thread holds rows gq and gq + 8 of the warp's 16.
      scores_to_weights(s, tile, warp_min_pos, gq, tq, scale_log2, m, l, o);
#pragma unroll
      for (int k2 = 0; k2 < kTile / 16; ++k2) {
        uint32_t pa[4];
        weights_fragment<T>(s, k2, pa);
        // Matrix i = lane / 8: positions +8 (i & 1), dims +8 (i >> 1): b0/b1 of n-tiles nd, nd + 1.
        const T* v_row = v_rows[k2 * 16 + (lane % 8) + ((lane / 8) & 1) * 8];
#pragma unroll
        for (int nd = 0; nd < ND; nd += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_row + (nd + lane / 16) * 8);
          mma<T>(o[nd], pa, b[0], b[1]);
          mma<T>(o[nd + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  if (warp_rows) write_rows<T, HD>(a, start, len, row0, h, gq, tq, l, o);
}

// The head-rows form (see the top of the file): G warps, warp w = query head g * G + w, rows
// 0..31 of the query block as tiles mt = 0, 1.
template <class T, int HD, int G>
__global__ void __launch_bounds__(32 * G, G <= 4 ? 2 : 1) prefill_head_kernel(AttentionArgs a) {
  constexpr int KS = HD / 16, ND = HD / 8, NB = kTile / 8, MT = kHeadRows / 16;
  using Row = KvRow<T, HD>;
  extern __shared__ __align__(16) unsigned char smem[];
  Row* sK = reinterpret_cast<Row*>(smem);  // [2 * kTile]: buffer b is rows [b * kTile, (b + 1) * kTile)
  Row* sV = sK + 2 * kTile;
  wait_for_predecessor();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int64_t g = blockIdx.y, h = g * G + warp;
  const int64_t qb = a.n_q_blocks - 1 - blockIdx.x;
  const int64_t start = a.q_block_start[qb], len = a.q_block_len[qb];
  const int64_t pos0 = a.pos[start], max_pos = pos0 + len - 1;
  const int64_t n_tiles = max_pos / kTile + 1;
  const BlockKv<T> kv = block_kv<T>(a, start, g, HD);
  const float scale_log2 = scale_log2_for(HD);
  load_kv_tile<T, HD>(kv, sK, sV, 0, max_pos, 0, 32 * G);

  // This warp's queries, rounded to T, rows past len zero; only this warp reads them.
  Row* q_rows = sV + 2 * kTile + warp * kHeadRows;
  for (int i = lane; i < kHeadRows * HD / 4; i += 32) {
    const int r = i / (HD / 4), c = (i % (HD / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < len) v = *reinterpret_cast<const float4*>(a.q + (start + r) * a.heads * HD + h * HD + c);
    *reinterpret_cast<uint2*>(&q_rows[r][c]) = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
  }
  __syncwarp();

  float o[MT][ND][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) o[mt][nd][0] = o[mt][nd][1] = o[mt][nd][2] = o[mt][nd][3] = 0.0f;
  }
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  // Lane's row of the A operand's 8x8 matrices (ldmatrix x4: rows +8 for matrices 1, 3; dims +8
  // for 2, 3), the order of mma's a0..a3.
  const Row* q_lane = q_rows + lane % 16;
  const int q_col = (lane / 16) * 8;

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int buf = static_cast<int>(it & 1);
    if (it + 1 < n_tiles) {
      load_kv_tile<T, HD>(kv, sK, sV, (it + 1) * kTile, max_pos, buf ^ 1, 32 * G);
    } else {
      cp_async_commit();  // an empty group, so "all but the newest" is always this tile
    }
    cp_async_wait<1>();
    __syncthreads();
    const int64_t tile = it * kTile;
    const Row* k_rows = sK + buf * kTile;
    const Row* v_rows = sV + buf * kTile;
    // S = Q.K^T for both row tiles: every K fragment feeds one product of each.
    float s[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks + 1 < KS; ks += 2) {
      uint32_t qa[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldmatrix_x4(qa[mt][0], q_lane[mt * 16] + ks * 16 + q_col);
        ldmatrix_x4(qa[mt][1], q_lane[mt * 16] + (ks + 1) * 16 + q_col);
      }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        uint32_t b[4];
        ldmatrix_x4(b, k_rows[nb * 8 + lane % 8] + ks * 16 + (lane / 8) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<T>(s[mt][nb], qa[mt][0], b[0], b[1]);
          mma<T>(s[mt][nb], qa[mt][1], b[2], b[3]);
        }
      }
    }
    if constexpr (KS % 2 == 1) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(qa[mt], q_lane[mt * 16] + (KS - 1) * 16 + q_col);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        uint32_t b[2];
        ldmatrix_x2(b, k_rows[nb * 8 + lane % 8] + (KS - 1) * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma<T>(s[mt][nb], qa[mt], b[0], b[1]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) scores_to_weights(s[mt], tile, pos0 + mt * 16, gq, tq, scale_log2, m[mt], l[mt], o[mt]);
    // O += P.V for both row tiles: every V fragment feeds one product of each.
#pragma unroll
    for (int k2 = 0; k2 < kTile / 16; ++k2) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) weights_fragment<T>(s[mt], k2, pa[mt]);
      const T* v_row = v_rows[k2 * 16 + (lane % 8) + ((lane / 8) & 1) * 8];
#pragma unroll
      for (int nd = 0; nd < ND; nd += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_row + (nd + lane / 16) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<T>(o[mt][nd], pa[mt], b[0], b[1]);
          mma<T>(o[mt][nd + 1], pa[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) write_rows<T, HD>(a, start, len, mt * 16, h, gq, tq, l[mt], o[mt]);
}

template <class T, int HD, int MT>
void launch_rows(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<HD>(0);
  allow_dynamic_smem<prefill_kernel<T, HD, MT>>(bytes);
  const auto group = static_cast<unsigned>(a.heads / a.kv_heads);
  const dim3 grid(static_cast<unsigned>(a.n_q_blocks), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(kPrefillQueryBlock / (16 * MT)));
  launch_kernel(prefill_kernel<T, HD, MT>, grid, 32 * group * MT, bytes, stream, a);
}

template <class T, int HD, int G>
void launch_head_rows(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<HD>(G * kHeadRows);
  allow_dynamic_smem<prefill_head_kernel<T, HD, G>>(bytes);
  const dim3 grid(static_cast<unsigned>(a.n_q_blocks), static_cast<unsigned>(a.kv_heads));
  launch_kernel(prefill_head_kernel<T, HD, G>, grid, 32 * G, bytes, stream, a);
}

template <class T, int HD>
void launch_hd(const AttentionArgs& a, PrefillKernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case PrefillKernel::row_tile: launch_rows<T, HD, 1>(a, stream); break;
    case PrefillKernel::row_tiles2: launch_rows<T, HD, 2>(a, stream); break;
    default:
      switch (a.heads / a.kv_heads) {
        case 1: launch_head_rows<T, HD, 1>(a, stream); break;
        case 2: launch_head_rows<T, HD, 2>(a, stream); break;
        case 4: launch_head_rows<T, HD, 4>(a, stream); break;
        default: launch_head_rows<T, HD, 8>(a, stream); break;
      }
  }
}

template <class T>
void launch(const AttentionArgs& a, PrefillKernel kernel, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16: launch_hd<T, 16>(a, kernel, stream); break;
    case 32: launch_hd<T, 32>(a, kernel, stream); break;
    case 64: launch_hd<T, 64>(a, kernel, stream); break;
    default: launch_hd<T, 128>(a, kernel, stream); break;
  }
}

}  // namespace

void prefill_attention(DType type, const AttentionArgs& args, cudaStream_t stream, PrefillKernel kernel) {
  if (args.n_q_blocks == 0) return;
  const int64_t group = args.heads / args.kv_heads;
  if (!prefill_kernel_serves(kernel, group)) {
    kernel = PrefillKernel::row_tile;
  }
  if (type == DType::f16) {
    launch<__half>(args, kernel, stream);
  } else {
    launch<__nv_bfloat16>(args, kernel, stream);
  }
}

}  // namespace kernelllm::cuda
