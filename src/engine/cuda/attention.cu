// Paged GQA attention with split-KV; see attention.cuh. A block handles one (token, KV head,
// split): its warps take 8 positions at a time each (4 lanes per position share the K row's
// 16-byte chunks), keep an online softmax for all the group's query heads, and meet in shared
// memory to write the split's (max, sum, unnormalized output); a second kernel merges the splits
// by their softmax statistics.
#include <cfloat>
#include <type_traits>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/attention_split.cuh"
#include "engine/cuda/common.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kLanesPerPos = 4;                  // lanes sharing one position's K row
constexpr int kPosPerWarp = 32 / kLanesPerPos;  // positions a warp takes at a time

// Warps per block: at most 16, fewer where the warps' partial outputs (G x 32 * D floats each)
// would pass 32 KB of shared memory. The kernel is bound by latency (ncu, one warp per scheduler:
// an instruction issued every ~7 cycles), so short chains per warp and many warps per SM.
template <int G, int D>
inline constexpr int kMaxPartialWarps =
    8192 / (G * 32 * D) > 16 ? 16 : (8192 / (G * 32 * D) < 4 ? 4 : 8192 / (G * 32 * D));

// Output d of one head from its slots (weights in w[0 .. splits)), in slot order. Every slot's
// value is loaded, 8 at a time in flight (a load under `if (w != 0)` waits for the one before
// it); an empty slot's, which nobody wrote and may be NaN, is then dropped by the select.
__device__ __forceinline__ float merge_dim(const float* acc, const float* w, int splits, int hd, int d) {
  float o = 0.0f;
  int s = 0;
  for (; s + 8 <= splits; s += 8) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __ldg(acc + static_cast<int64_t>(s + j) * hd + d);
#pragma unroll
    for (int j = 0; j < 8; ++j) o += w[s + j] != 0.0f ? v[j] * w[s + j] : 0.0f;
  }
  for (; s < splits; ++s) {
    const float v = __ldg(acc + static_cast<int64_t>(s) * hd + d);
    o += w[s] != 0.0f ? v * w[s] : 0.0f;
  }
  return o;
}

// Element i of the fused projection rows of a rope-folded pass (AttentionArgs::rope_qkv).
template <class T>
__device__ __forceinline__ float rope_in(const AttentionArgs& a, int64_t i) {
  return a.rope_qkv_f32 ? static_cast<const float*>(a.rope_qkv)[i] : to_f32(static_cast<const T*>(a.rope_qkv)[i]);
}

// Dim d of head `hh` of token t's fused row (q heads first, then k heads) rotated to position p
// (rope_pair, as rope_write_kv rotates it).
template <class T>
__device__ __forceinline__ float rope_rotated(const AttentionArgs& a, int64_t t, int64_t hh, int d, int hd, int p) {
  const int half = hd / 2, j = d < half ? d : d - half;
  const int64_t head = t * (a.heads + 2 * a.kv_heads) * hd + hh * hd;
  const float2 r = rope_pair(rope_in<T>(a, head + j), rope_in<T>(a, head + j + half), p, a.rope_inv_freq[j]);
  return d < half ? r.x : r.y;
}

// G: query heads per KV head (rounded up to a power of two; extra heads are skipped),
// D: head dims per lane in the P.V phase (head_dim <= 32 * D; lane i owns dims [i*D, i*D+D)).
// A warp takes positions base .. base + 7: in the Q.K phase lanes 4j .. 4j + 3 score position
// base + j for all G heads (lane 4j + c reads K chunks c, c + 4, ...; q from shared memory) and
// add their sums by two shuffles; the softmax statistics of the 8 positions are three shuffles
// per head; in the P.V phase lanes own dims, each position's weight broadcast by a shuffle. The V
// rows are loaded together with the K rows (they do not depend on the scores): one round trip.
// The body of the partial kernels below (W warps per block).
// Rope: whether the instance folds RoPE and the KV write in (AttentionArgs::rope_qkv); the packed
// kernel below does not (with it, its spills at 80 registers went from 76 to 168 bytes and k = 20
// decode from 7.10 to 7.24 ms per step).
template <class T, int G, int D, int W, bool Rope>
__device__ __forceinline__ void partial_body(const AttentionArgs& a) {
  constexpr int kWarps = W;
  constexpr int kThreads = kWarps * 32;
  constexpr int V = Vec16<T>::kN;
  constexpr int kChunks = 32 * D / V;  // 16-byte chunks of a K row padded to 32 * D
  constexpr int kMine = kChunks / kLanesPerPos;
  static_assert(kMine >= 1, "a lane holds at least one K chunk");
  const int t = static_cast<int>(blockIdx.x), g = static_cast<int>(blockIdx.y), split = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane % kLanesPerPos, row = lane / kLanesPerPos;
  const int hd = static_cast<int>(a.head_dim), group = static_cast<int>(a.heads / a.kv_heads);
  const int64_t kv_dim = a.kv.kv_dim;
  // The block's K and V rows are fetched into L2 while the previous kernel (RoPE, which writes
  // this token's row) still runs; an empty split's statistics are written (enter_split).
  const auto [n_ctx, begin, end, table, slot0] = enter_split<T>(a, t, g, split, hd, kThreads);
  if (begin >= end) return;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const int pt = static_cast<int>(a.kv.page_tokens);
  const float scale = rsqrtf(static_cast<float>(hd));
  const bool fused = Rope && a.rope_qkv != nullptr;

  __shared__ __align__(16) float s_q[G][32 * D];
  for (int i = static_cast<int>(threadIdx.x); i < G * 32 * D; i += kThreads) {
    const int h = i / (32 * D), d = i % (32 * D);
    const int64_t head = static_cast<int64_t>(t) * a.heads + g * group + h;
    float x = 0.0f;
    if (h < group && d < hd) {
      x = fused ? rope_rotated<T>(a, t, g * group + h, d, hd, n_ctx - 1) : a.q[head * hd + d];
      if (fused && a.rope_q_out != nullptr && split == 0) a.rope_q_out[head * hd + d] = x;
    }
    s_q[h][d] = x * scale;
  }
  // A rope-folded pass: the block holding the token's own position writes its K and V rows and
  // keeps them (as the cache holds them) for the score after the loop, which stops short of it.
  __shared__ __align__(16) float s_own[2][32 * D];
  const bool own = fused && end == n_ctx;
  if (own) {
    T* krow = const_cast<T*>(paged_k_row(pool, table, n_ctx - 1, pt, a.kv.layers, a.layer, kv_dim)) +
              static_cast<int64_t>(g) * hd;
    const int64_t v_in = static_cast<int64_t>(t) * (a.heads + 2 * a.kv_heads) * hd + (a.heads + a.kv_heads) * hd +
                         static_cast<int64_t>(g) * hd;
    for (int d = static_cast<int>(threadIdx.x); d < 32 * D; d += kThreads) {
      float k = 0.0f, v = 0.0f;
      if (d < hd) {
        const T kr = from_f32<T>(rope_rotated<T>(a, t, a.heads + g, d, hd, n_ctx - 1));
        const T vr = from_f32<T>(rope_in<T>(a, v_in + d));
        krow[d] = kr;
        krow[static_cast<int64_t>(pt) * kv_dim + d] = vr;
        k = to_f32(kr);
        v = to_f32(vr);
      }
      s_own[0][d] = k;
      s_own[1][d] = v;
    }
  }
  const int loop_end = own ? end - 1 : end;
  __syncthreads();

  float acc[G][D], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[h][i] = 0.0f;
  }
  struct alignas(D * sizeof(T)) Dims {
    T e[D];
  };
  for (int base = begin + warp * kPosPerWarp; base < loop_end; base += kWarps * kPosPerWarp) {
    const int p = base + row;
    const bool valid = p < loop_end;
    const T* kp = paged_k_row(pool, table, valid ? p : begin, pt, a.kv.layers, a.layer, kv_dim) +
                  static_cast<int64_t>(g) * hd;
    uint4 kraw[kMine];
#pragma unroll
    for (int i = 0; i < kMine; ++i) {
      const int c = sub + i * kLanesPerPos;
      kraw[i] = c * V < hd ? __ldg(reinterpret_cast<const uint4*>(kp + c * V)) : make_uint4(0, 0, 0, 0);
    }
    // The V rows of the warp's positions, a lane's D dims of each, from the row pointers of
    // lanes 0, 4, ..., 28.
    const auto my_v = reinterpret_cast<unsigned long long>(kp + static_cast<int64_t>(pt) * kv_dim);
    const int n_here = loop_end - base < kPosPerWarp ? loop_end - base : kPosPerWarp;
    Dims v[kPosPerWarp];
#pragma unroll
    for (int j = 0; j < kPosPerWarp; ++j) {
      const T* vrow = reinterpret_cast<const T*>(__shfl_sync(0xffffffffu, my_v, j * kLanesPerPos));
      if (j < n_here && lane * D < hd) {
        v[j] = *reinterpret_cast<const Dims*>(vrow + lane * D);
      } else {
#pragma unroll
        for (int i = 0; i < D; ++i) v[j].e[i] = from_f32<T>(0.0f);
      }
    }
    float s[G];
#pragma unroll
    for (int h = 0; h < G; ++h) s[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMine; ++i) {
      const int c = sub + i * kLanesPerPos;
      const T* ke = reinterpret_cast<const T*>(&kraw[i]);
#pragma unroll
      for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int e = 0; e < V; ++e) s[h] += s_q[h][c * V + e] * to_f32(ke[e]);
      }
    }
    float e[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
#pragma unroll
      for (int o = 1; o < kLanesPerPos; o <<= 1) s[h] += __shfl_xor_sync(0xffffffffu, s[h], o);
      float tile_max = valid ? s[h] : -FLT_MAX;
#pragma unroll
      for (int o = kLanesPerPos; o < 32; o <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const float m_new = fmaxf(m[h], tile_max);
      const float corr = __expf(m[h] - m_new);
      e[h] = valid ? __expf(s[h] - m_new) : 0.0f;
      float sum = e[h];  // one copy of each position's weight: across the lane groups only
#pragma unroll
      for (int o = kLanesPerPos; o < 32; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l[h] = l[h] * corr + sum;
#pragma unroll
      for (int i = 0; i < D; ++i) acc[h][i] *= corr;
      m[h] = m_new;
    }
#pragma unroll
    for (int j = 0; j < kPosPerWarp; ++j) {
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float w = __shfl_sync(0xffffffffu, e[h], j * kLanesPerPos);
#pragma unroll
        for (int i = 0; i < D; ++i) acc[h][i] += w * to_f32(v[j].e[i]);
      }
    }
  }

  // The own position of a rope-folded pass, in the last warp's softmax.
  if (own && warp == kWarps - 1) {
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float sc = 0.0f;
#pragma unroll
      for (int i = 0; i < D; ++i) sc += s_q[h][lane * D + i] * s_own[0][lane * D + i];
      sc = warp_sum(sc);
      const float m_new = fmaxf(m[h], sc);
      const float corr = __expf(m[h] - m_new), e = __expf(sc - m_new);
      l[h] = l[h] * corr + e;
#pragma unroll
      for (int i = 0; i < D; ++i) acc[h][i] = acc[h][i] * corr + e * s_own[1][lane * D + i];
      m[h] = m_new;
    }
  }

  // The warps' (max, sum, output) into one split slot per head.
  __shared__ float s_ml[kWarps][G][2];
  __shared__ __align__(16) float s_acc[kWarps][G][32 * D];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (lane == 0) {
      s_ml[warp][h][0] = m[h];
      s_ml[warp][h][1] = l[h];
    }
#pragma unroll
    for (int i = 0; i < D; ++i) s_acc[warp][h][lane * D + i] = acc[h][i];
  }
  __syncthreads();
  store_split_slots<kWarps, G, 32 * D, false>(a, slot0, group, hd, s_ml, s_acc);
}

template <class T, int G, int D, int W>
__global__ void __launch_bounds__(W * 32) attention_partial_kernel(AttentionArgs a) {
  partial_body<T, G, D, W, true>(a);
}

// 8 warps with the registers held to 80 (three blocks per SM; an explicit bound of one block
// per SM gives the kernel above 140 instead of ~105, one block per SM).
template <class T, int G, int D>
__global__ void __launch_bounds__(8 * 32, 3) attention_partial_packed_kernel(AttentionArgs a) {
  partial_body<T, G, D, 8, false>(a);
}

// The warps per block of the partial kernel for a grid of `blocks` (warps as attention() takes it).
template <int G, int D>
int partial_warps(int64_t blocks, int warps) {
  constexpr int kMax = kMaxPartialWarps<G, D>;
  if (warps == 0) warps = blocks <= current_sm_count() ? 16 : 8;
  return kMax >= 16 && warps >= 16 ? 16 : (kMax < 8 ? kMax : 8);
}

// Whether the packed instance serves: where the 8-warp blocks (~105 registers, two per SM) would
// not fit in one wave, blocks held to 80 registers, three per SM: the k = 20 decode pass's 320
// blocks (7.22 / 7.15 against 7.26 / 7.24 ms a step on the H100). Measured with bf16 caches (76
// bytes of spills at G = D = 4; f16 spills 160, f32 464); where the grid fits in one wave the
// spills cost more than they give (n = 10: 6.28 against 6.17 ms).
template <class T, int G, int D>
bool packed_serves(int64_t blocks, int warps) {
  return std::is_same_v<T, __nv_bfloat16> && G <= 4 && D <= 4 && partial_warps<G, D>(blocks, warps) == 8 &&
         blocks > 2 * static_cast<int64_t>(current_sm_count());
}

template <class T, int G, int D>
void launch_partial_d(const AttentionArgs& args, dim3 grid, int warps, cudaStream_t stream) {
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && G <= 4 && D <= 4) {
    if (packed_serves<T, G, D>(blocks, warps)) {
      launch_kernel(attention_partial_packed_kernel<T, G, D>, grid, 8 * 32, 0, stream, args);
      return;
    }
  }
  const int w = partial_warps<G, D>(blocks, warps);
  if constexpr (kMaxPartialWarps<G, D> >= 16) {
    if (w == 16) {
      launch_kernel(attention_partial_kernel<T, G, D, 16>, grid, 16 * 32, 0, stream, args);
      return;
    }
  }
  constexpr int kW = kMaxPartialWarps<G, D> < 8 ? kMaxPartialWarps<G, D> : 8;
  launch_kernel(attention_partial_kernel<T, G, D, kW>, grid, kW * 32, 0, stream, args);
}

// f.template operator()<T, G, D>() with the partial kernel's parameters for `args`: the cache
// dtype, the group rounded up to a power of two, head dims per lane.
template <class F>
void visit_partial(DType type, const AttentionArgs& args, F&& f) {
  dispatch_dtype(type, [&](auto x) {
    using T = decltype(x);
    const int64_t group = args.heads / args.kv_heads, d = (args.head_dim + 31) / 32;
    const auto with_g = [&]<int G>() {
      if (d <= 1) {
        f.template operator()<T, G, 1>();
      } else if (d <= 2) {
        f.template operator()<T, G, 2>();
      } else if (d <= 4) {
        f.template operator()<T, G, 4>();
      } else {
        f.template operator()<T, G, 8>();
      }
    };
    if (group <= 1) {
      with_g.template operator()<1>();
    } else if (group <= 2) {
      with_g.template operator()<2>();
    } else if (group <= 4) {
      with_g.template operator()<4>();
    } else {
      with_g.template operator()<8>();
    }
  });
}

// One block per (token, head). The first warp forms the slots' weights exp(m_s - max) (0 for an
// empty slot, sum 0, whose output nobody wrote) from one load per slot (lane s holds slots s and
// s + 32) and 1 / sum of l_s times the weights; then each thread sums its dims over the slots in
// order.
template <class T>
__global__ void attention_merge_kernel(AttentionArgs a) {
  static_assert(kMaxAttentionSplits <= 64, "two slots per lane");
  wait_for_predecessor();
  const int64_t th = blockIdx.x;  // token * heads + head
  const int hd = static_cast<int>(a.head_dim), splits = static_cast<int>(a.splits);
  __shared__ float s_w[kMaxAttentionSplits];
  __shared__ float s_inv;
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    const float2* ml = reinterpret_cast<const float2*>(a.partial_ml) + th * splits;
    float2 v[2];
    float mx = -FLT_MAX;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int s = lane + 32 * r;
      v[r] = s < splits ? __ldg(ml + s) : float2{-FLT_MAX, 0.0f};
      if (v[r].y > 0.0f) mx = fmaxf(mx, v[r].x);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int s = lane + 32 * r;
      const float w = v[r].y > 0.0f ? __expf(v[r].x - mx) : 0.0f;
      sum += v[r].y > 0.0f ? v[r].y * w : 0.0f;
      if (s < splits) s_w[s] = w;
    }
    sum = warp_sum(sum);
    if (lane == 0) s_inv = 1.0f / sum;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out) + th * hd;
  const float* acc = a.partial_acc + th * splits * hd;
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += static_cast<int>(blockDim.x)) {
    out[d] = from_f32<T>(merge_dim(acc, s_w, splits, hd, d) * s_inv);
  }
}

}  // namespace

void attention_partial(DType type, const AttentionArgs& args, int64_t grid_splits, cudaStream_t stream, int warps) {
  if (args.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(args.n_tokens), static_cast<unsigned>(args.kv_heads),
                  static_cast<unsigned>(grid_splits));
  visit_partial(type, args, [&]<class T, int G, int D>() { launch_partial_d<T, G, D>(args, grid, warps, stream); });
}

bool attention_partial_folds_rope(DType type, const AttentionArgs& args, int64_t grid_splits, int warps) {
  const int64_t blocks = args.n_tokens * args.kv_heads * grid_splits;
  bool folds = true;
  visit_partial(type, args, [&]<class T, int G, int D>() { folds = !packed_serves<T, G, D>(blocks, warps); });
  return folds;
}

void attention_merge(DType type, const AttentionArgs& args, cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(attention_merge_kernel<T>, static_cast<unsigned>(args.n_tokens * args.heads), 128, 0, stream, args);
  });
}

void attention(DType type, const AttentionArgs& args, cudaStream_t stream, int warps) {
  attention_partial(type, args, args.splits, stream, warps);
  attention_merge(type, args, stream);
}

}  // namespace kernelllm::cuda
