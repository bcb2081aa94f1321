// Prefill attention on the tensor cores (bf16/f16 caches), flash-attention style. A block
// serves one query block (up to kPrefillQueryBlock consecutive tokens of one sequence) for one
// KV head: warp w takes query head w % group of that KV head and rows [16 m, 16 m + 16) of the
// block, m = blockIdx.z * MT + w / group, so the K/V tiles in shared memory serve group x 16 x MT
// query rows. K and V tiles of 64 positions are copied with cp.async into two buffers (the next
// tile's copy in flight while this one is used) in their cache layout, [position][dim]: ldmatrix
// gives the B operands of S = Q.K^T directly and, transposed, those of O += P.V. The softmax is
// online in fp32 registers; P is rounded to the cache dtype for the second product. Query
// blocks run longest context first (blockIdx.x counts from the last block) so the causal
// triangle's heavy blocks do not form the tail.
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

template <int HD>
constexpr size_t smem_bytes() {
  return size_t{2} * 2 * kTile * (HD + kPad) * 2;  // {K, V} x 2 buffers x kTile rows, 2-byte elements
}

template <class T, int HD, int MT>
__global__ void prefill_kernel(AttentionArgs a) {
  constexpr int KS = HD / 16;     // k-steps over head dims
  constexpr int ND = HD / 8;      // output n-tiles
  constexpr int NB = kTile / 8;   // score n-tiles per K/V tile
  constexpr int kChunks = kTile * HD / 8;
  using Row = T[HD + kPad];
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
  const int64_t kv_dim = a.kv.kv_dim;
  const int pt = static_cast<int>(a.kv.page_tokens);
  const int32_t* table = a.block_table + static_cast<int64_t>(a.seq[start]) * a.table_width;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const float scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;

  auto load_tile = [&](int64_t tile, int buf) {
    for (int c = threadIdx.x; c < kChunks; c += blockDim.x) {
      const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
      const int64_t pos = tile + p;
      const bool ok = pos <= block_max_pos;
      const T* kp = ok ? paged_k_row(pool, table, static_cast<int>(pos), pt, a.kv.layers, a.layer, kv_dim) + g * HD + d0
                       : pool;
      cp_async16(&sK[buf * kTile + p][d0], kp, ok);
      cp_async16(&sV[buf * kTile + p][d0], ok ? kp + pt * kv_dim : pool, ok);
    }
    cp_async_commit();
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
      // Scale, causal mask (only where the tile reaches past the warp's first row), online
      // softmax; this thread holds rows gq (r = 0) and gq + 8 (r = 1) of the warp's 16.
      const bool masked = tile + kTile - 1 > warp_min_pos;
      float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const int64_t pos = tile + nb * 8 + 2 * tq + (e & 1);
          const bool ok = !masked || pos <= warp_min_pos + gq + r * 8;
          s[nb][e] = ok ? s[nb][e] * scale_log2 : -INFINITY;
          row_max[r] = fmaxf(row_max[r], s[nb][e]);
        }
      }
      softmax_tile(s, row_max, m, l, o);
#pragma unroll
      for (int k2 = 0; k2 < kTile / 16; ++k2) {
        const uint32_t pa[4] = {pack2<T>(s[2 * k2][0], s[2 * k2][1]), pack2<T>(s[2 * k2][2], s[2 * k2][3]),
                                pack2<T>(s[2 * k2 + 1][0], s[2 * k2 + 1][1]),
                                pack2<T>(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
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
  if (!warp_rows) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + gq + r * 8;
    if (row >= len) continue;
    const float inv = 1.0f / l[r];
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + (start + row) * a.heads * HD + h * HD + 2 * tq);
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) dst[nd * 4] = pack2<T>(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv);
  }
}

template <class T, int HD, int MT>
void launch_as(const AttentionArgs& a, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<HD>();
  allow_dynamic_smem<prefill_kernel<T, HD, MT>>(bytes);
  const auto group = static_cast<unsigned>(a.heads / a.kv_heads);
  const dim3 grid(static_cast<unsigned>(a.n_q_blocks), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(kPrefillQueryBlock / (16 * MT)));
  launch_kernel(prefill_kernel<T, HD, MT>, grid, 32 * group * MT, bytes, stream, a);
}

template <class T, int MT>
void launch_hd(const AttentionArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16: launch_as<T, 16, MT>(a, stream); break;
    case 32: launch_as<T, 32, MT>(a, stream); break;
    case 64: launch_as<T, 64, MT>(a, stream); break;
    default: launch_as<T, 128, MT>(a, stream); break;
  }
}

template <class T>
void launch(const AttentionArgs& a, int row_tiles, cudaStream_t stream) {
  // At most 8 warps per block: two row tiles only for groups of up to 4 query heads.
  if (row_tiles != 1 && a.heads / a.kv_heads <= 4) {
    launch_hd<T, 2>(a, stream);
  } else {
    launch_hd<T, 1>(a, stream);
  }
}

}  // namespace

bool prefill_attention_supported(DType type, int64_t head_dim, int64_t group) {
  return (type == DType::bf16 || type == DType::f16) &&
         (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8;
}

void prefill_attention(DType type, const AttentionArgs& args, cudaStream_t stream, int row_tiles) {
  if (args.n_q_blocks == 0) return;
  if (type == DType::f16) {
    launch<__half>(args, row_tiles, stream);
  } else {
    launch<__nv_bfloat16>(args, row_tiles, stream);
  }
}

}  // namespace kernelllm::cuda
