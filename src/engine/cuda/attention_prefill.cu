// Prefill attention on the tensor cores (bf16/f16 caches): one block per (query block of up
// to 16 consecutive tokens of one sequence, KV head), one warp per query head of the group.
// K and V tiles of 32 positions go through shared memory (V transposed) and feed
// mma.sync m16n8k16 for S = Q.K^T and O += P.V, with an online softmax in fp32 registers
// (flash-attention style; P is rounded to the cache dtype for the second product).
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/device_types.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kPad = 8;

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <class T, int HD>
__global__ void prefill_kernel(AttentionArgs a) {
  constexpr int KS = HD / 16;  // k-steps over head dims
  constexpr int ND = HD / 8;   // output n-tiles
  __shared__ __align__(16) T sK[kTile][HD + kPad];
  __shared__ __align__(16) T sVt[HD][kTile + kPad];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
  const int64_t group = a.heads / a.kv_heads, g = blockIdx.y, h = g * group + warp;
  const int64_t start = a.q_block_start[blockIdx.x];
  const int64_t len = a.q_block_len[blockIdx.x];
  const int64_t pos0 = a.pos[start], max_pos = pos0 + len - 1;
  const int64_t kv_dim = a.kv.kv_dim, pt = a.kv.page_tokens;
  const int32_t* table = a.block_table + static_cast<int64_t>(a.seq[start]) * a.table_width;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const float scale_log2 = rsqrtf(static_cast<float>(HD)) * 1.4426950408889634f;

  uint32_t qf[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = gq + (j & 1) * 8;
      const int col = ks * 16 + 2 * tq + (j >> 1) * 8;
      float x0 = 0.0f, x1 = 0.0f;
      if (row < len) {
        const float* q = a.q + (start + row) * a.heads * HD + h * HD + col;
        x0 = q[0];
        x1 = q[1];
      }
      qf[ks][j] = pack2<T>(x0, x1);
    }
  }
  float o[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int64_t tile = 0; tile <= max_pos; tile += kTile) {
    __syncthreads();
    for (int c = threadIdx.x; c < kTile * HD / 8; c += blockDim.x) {
      const int p = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
      const int64_t pos = tile + p;
      uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
      if (pos <= max_pos) {
        const int64_t page = table[pos / pt];
        const T* kp = pool + (((page * a.kv.layers + a.layer) * 2 + 0) * pt + pos % pt) * kv_dim + g * HD + d0;
        kv4 = *reinterpret_cast<const uint4*>(kp);
        vv4 = *reinterpret_cast<const uint4*>(kp + pt * kv_dim);
      }
      *reinterpret_cast<uint4*>(&sK[p][d0]) = kv4;
      const T* v = reinterpret_cast<const T*>(&vv4);
#pragma unroll
      for (int i = 0; i < 8; ++i) sVt[d0 + i][p] = v[i];
    }
    __syncthreads();

    float s[4][4];
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&sK[nb * 8 + gq][ks * 16 + 2 * tq]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&sK[nb * 8 + gq][ks * 16 + 2 * tq + 8]);
        mma<T>(s[nb], qf[ks], b0, b1);
      }
    }
    // Causal mask and the online softmax; this thread holds rows gq (r = 0) and gq + 8 (r = 1).
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int64_t row = gq + r * 8;
        const int64_t pos = tile + nb * 8 + 2 * tq + (e & 1);
        const bool ok = row < len && pos <= pos0 + row;
        s[nb][e] = ok ? s[nb][e] * scale_log2 : -INFINITY;
        row_max[r] = fmaxf(row_max[r], s[nb][e]);
      }
    }
    float corr[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
      const float m_new = fmaxf(m[r], row_max[r]);
      base[r] = m_new == -INFINITY ? 0.0f : m_new;
      corr[r] = exp2f(m[r] - base[r]);
      m[r] = m_new;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      o[nd][0] *= corr[0];
      o[nd][1] *= corr[0];
      o[nd][2] *= corr[1];
      o[nd][3] *= corr[1];
    }
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        s[nb][e] = exp2f(s[nb][e] - base[r]);
        l[r] += s[nb][e];
      }
    }
#pragma unroll
    for (int k2 = 0; k2 < 2; ++k2) {
      const uint32_t pa[4] = {pack2<T>(s[2 * k2][0], s[2 * k2][1]), pack2<T>(s[2 * k2][2], s[2 * k2][3]),
                              pack2<T>(s[2 * k2 + 1][0], s[2 * k2 + 1][1]), pack2<T>(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&sVt[nd * 8 + gq][k2 * 16 + 2 * tq]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&sVt[nd * 8 + gq][k2 * 16 + 2 * tq + 8]);
        mma<T>(o[nd], pa, b0, b1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = gq + r * 8;
    if (row >= len) continue;
    const float inv = 1.0f / l[r];
    T* dst = out + (start + row) * a.heads * HD + h * HD;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      dst[nd * 8 + 2 * tq] = from_f32<T>(o[nd][2 * r] * inv);
      dst[nd * 8 + 2 * tq + 1] = from_f32<T>(o[nd][2 * r + 1] * inv);
    }
  }
}

template <class T>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_q_blocks), static_cast<unsigned>(a.kv_heads));
  const auto threads = static_cast<unsigned>(32 * (a.heads / a.kv_heads));
  switch (a.head_dim) {
    case 16: prefill_kernel<T, 16><<<grid, threads, 0, stream>>>(a); break;
    case 32: prefill_kernel<T, 32><<<grid, threads, 0, stream>>>(a); break;
    case 64: prefill_kernel<T, 64><<<grid, threads, 0, stream>>>(a); break;
    default: prefill_kernel<T, 128><<<grid, threads, 0, stream>>>(a); break;
  }
}

}  // namespace

bool prefill_attention_supported(DType type, int64_t head_dim, int64_t group) {
  return (type == DType::bf16 || type == DType::f16) &&
         (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8;
}

void prefill_attention(DType type, const AttentionArgs& args, cudaStream_t stream) {
  if (args.n_q_blocks == 0) return;
  if (type == DType::f16) {
    launch<__half>(args, stream);
  } else {
    launch<__nv_bfloat16>(args, stream);
  }
}

}  // namespace kernelllm::cuda
