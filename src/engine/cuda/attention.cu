// Paged GQA attention with split-KV; see attention.cuh. A block of 4 warps handles one
// (token, KV head, split) with an online softmax over tiles of 32 positions per warp for all
// the group's query heads, the warps merge in shared memory
// and write the split's (max, sum, unnormalized output); a second kernel merges the splits.
#include <cfloat>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarps = 4;

// G: query heads per KV head (rounded up to a power of two; extra heads are skipped),
// D: head dims per lane in the P.V phase (head_dim <= 32 * D; lane i owns dims [i*D, i*D+D)).
// A warp takes 32 positions at a time: in the Q.K phase lane j scores position j for all G
// heads (its K row read with 16-byte loads, q broadcast from shared memory), then the tile's
// softmax statistics are two warp reductions per head, and in the P.V phase lanes own dims
// while each position's weight is broadcast by a shuffle.
template <class T, int G, int D>
__global__ void __launch_bounds__(kWarps * 32) attention_partial_kernel(AttentionArgs a) {
  constexpr int V = Vec16<T>::kN;
  const int64_t t = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hd = a.head_dim, group = a.heads / a.kv_heads, kv_dim = a.kv.kv_dim;
  // The metadata (positions, page tables) is uploaded before the pass, and the cache rows
  // before this token's were written by earlier passes: this block's K and V rows are fetched
  // into L2 while the previous kernel (RoPE, which writes this token's row) still runs.
  const int64_t n_ctx = a.pos[t] + 1;
  const int64_t first = a.ctx_begin != nullptr ? a.ctx_begin[t] : 0;
  const int64_t chunk = (n_ctx - first + gridDim.z - 1) / gridDim.z;
  const int64_t begin = first + split * chunk;
  const int64_t end = begin + chunk < n_ctx ? begin + chunk : n_ctx;
  const T* pool = static_cast<const T*>(a.kv.pool);
  const int32_t* table = a.block_table + static_cast<int64_t>(a.seq[t]) * a.table_width;
  const int64_t pt = a.kv.page_tokens;
  prefetch_kv_rows(pool, table, begin, end, static_cast<int>(pt), a.kv.layers, a.layer, kv_dim, g * hd, hd,
                   static_cast<int>(threadIdx.x), kWarps * 32);
  grid_dependency_wait();
  allow_dependent_launch();
  const float scale = rsqrtf(static_cast<float>(hd));

  __shared__ __align__(16) float s_q[G][32 * D];
  for (int64_t i = threadIdx.x; i < G * 32 * D; i += kWarps * 32) {
    const int64_t h = i / (32 * D), d = i % (32 * D);
    s_q[h][d] = (h < group && d < hd) ? a.q[(t * a.heads + g * group + h) * hd + d] * scale : 0.0f;
  }
  __syncthreads();

  float acc[G][D], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < D; ++i) acc[h][i] = 0.0f;
  }
  for (int64_t tile = begin + warp * 32; tile < end; tile += kWarps * 32) {
    const int64_t p = tile + lane;
    const bool valid = p < end;
    const T* kp = paged_k_row(pool, table, static_cast<int>(valid ? p : begin), static_cast<int>(pt), a.kv.layers,
                              a.layer, kv_dim) +
                  g * hd;
    const T* vp = kp + pt * kv_dim;
    // All of the K row's 16-byte chunks are loaded before any is used (the loop has a fixed
    // trip count, so it unrolls and the loads are in flight together).
    constexpr int kKChunks = 32 * D / V;
    uint4 kraw[kKChunks];
#pragma unroll
    for (int c = 0; c < kKChunks; ++c) {
      kraw[c] = c * V < hd ? __ldg(reinterpret_cast<const uint4*>(kp + c * V)) : make_uint4(0, 0, 0, 0);
    }
    float s[G];
#pragma unroll
    for (int h = 0; h < G; ++h) s[h] = 0.0f;
#pragma unroll
    for (int c = 0; c < kKChunks; ++c) {
      const T* ke = reinterpret_cast<const T*>(&kraw[c]);
#pragma unroll
      for (int h = 0; h < G; ++h) {
#pragma unroll
        for (int i = 0; i < V; ++i) s[h] += s_q[h][c * V + i] * to_f32(ke[i]);
      }
    }
    float e[G];
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float tile_max = valid ? s[h] : -FLT_MAX;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const float m_new = fmaxf(m[h], tile_max);
      const float corr = __expf(m[h] - m_new);
      e[h] = valid ? __expf(s[h] - m_new) : 0.0f;
      l[h] = l[h] * corr + warp_sum(e[h]);
#pragma unroll
      for (int i = 0; i < D; ++i) acc[h][i] *= corr;
      m[h] = m_new;
    }
    const auto my_v = reinterpret_cast<unsigned long long>(vp);
    const int64_t n_here = end - tile < 32 ? end - tile : 32;
    // V rows kVBatch at a time, a lane's D dims of each in one vector load, all in flight together.
    constexpr int kVBatch = 256 / (D * sizeof(T)) < 32 ? 256 / (D * sizeof(T)) : 32;
    struct alignas(D * sizeof(T)) Dims {
      T e[D];
    };
    for (int j0 = 0; j0 < n_here; j0 += kVBatch) {
      Dims v[kVBatch];
#pragma unroll
      for (int j = 0; j < kVBatch; ++j) {
        const T* row = reinterpret_cast<const T*>(__shfl_sync(0xffffffffu, my_v, (j0 + j) % 32));
        if (j0 + j < n_here && lane * D < hd) {
          v[j] = *reinterpret_cast<const Dims*>(row + lane * D);
        } else {
#pragma unroll
          for (int i = 0; i < D; ++i) v[j].e[i] = from_f32<T>(0.0f);
        }
      }
#pragma unroll
      for (int j = 0; j < kVBatch; ++j) {
#pragma unroll
        for (int h = 0; h < G; ++h) {
          const float w = __shfl_sync(0xffffffffu, e[h], (j0 + j) % 32);
#pragma unroll
          for (int i = 0; i < D; ++i) acc[h][i] += w * to_f32(v[j].e[i]);
        }
      }
    }
  }

  __shared__ float s_ml[kWarps][G][2];
  __shared__ float s_acc[kWarps][G][32 * D];
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
  for (int64_t idx = threadIdx.x; idx < group * hd; idx += kWarps * 32) {
    const int64_t h = idx / hd, d = idx % hd;
    float mx = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_ml[w][h][0]);
    float sum = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = s_ml[w][h][1] > 0.0f ? __expf(s_ml[w][h][0] - mx) : 0.0f;
      sum += s_ml[w][h][1] * f;
      o += s_acc[w][h][d] * f;
    }
    const int64_t slot = (t * a.heads + g * group + h) * a.splits + split;
    a.partial_acc[slot * hd + d] = o;
    if (d == 0) {
      a.partial_ml[slot * 2] = mx;
      a.partial_ml[slot * 2 + 1] = sum;
    }
  }
}

template <class T, int G>
void launch_partial(const AttentionArgs& args, dim3 grid, cudaStream_t stream) {
  const int64_t d = (args.head_dim + 31) / 32;
  if (d <= 1) {
    launch_kernel(attention_partial_kernel<T, G, 1>, grid, kWarps * 32, 0, stream, args);
  } else if (d <= 2) {
    launch_kernel(attention_partial_kernel<T, G, 2>, grid, kWarps * 32, 0, stream, args);
  } else if (d <= 4) {
    launch_kernel(attention_partial_kernel<T, G, 4>, grid, kWarps * 32, 0, stream, args);
  } else {
    launch_kernel(attention_partial_kernel<T, G, 8>, grid, kWarps * 32, 0, stream, args);
  }
}

// One block per (token, head). Every warp reads the split statistics itself (lane s holds
// split s's, 32 splits per round) and forms the weights exp(m_s - max) in registers; a thread
// then sums its dims over the splits with the weights broadcast by shuffle, the partial loads
// independent of each other: the merge is two rounds of loads, not one per split. Empty splits
// (sum 0) get weight 0 and their outputs, which nobody wrote, are not read.
template <class T>
__global__ void attention_merge_kernel(AttentionArgs a) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t th = blockIdx.x;  // token * heads + head
  const int64_t hd = a.head_dim, splits = a.splits;
  const int lane = threadIdx.x % 32;
  const float2* ml = reinterpret_cast<const float2*>(a.partial_ml) + th * splits;
  float mx = -FLT_MAX;
  for (int64_t s0 = 0; s0 < splits; s0 += 32) {
    const float2 v = s0 + lane < splits ? ml[s0 + lane] : float2{-FLT_MAX, 0.0f};
    float m = v.y > 0.0f ? v.x : -FLT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    mx = fmaxf(mx, m);
  }
  float total = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += 32) {
    const float2 v = s0 + lane < splits ? ml[s0 + lane] : float2{-FLT_MAX, 0.0f};
    total += warp_sum(v.y > 0.0f ? v.y * __expf(v.x - mx) : 0.0f);
  }
  const float inv = 1.0f / total;
  T* out = static_cast<T*>(a.out) + th * hd;
  const float* acc = a.partial_acc + th * splits * hd;
  for (int64_t d0 = 0; d0 < hd; d0 += blockDim.x) {
    const int64_t d = d0 + threadIdx.x;
    float o = 0.0f;
    for (int64_t s0 = 0; s0 < splits; s0 += 32) {
      const float2 v = s0 + lane < splits ? ml[s0 + lane] : float2{-FLT_MAX, 0.0f};
      const float f = v.y > 0.0f ? __expf(v.x - mx) : 0.0f;
      const int64_t n_here = splits - s0 < 32 ? splits - s0 : 32;
#pragma unroll 8
      for (int j = 0; j < n_here; ++j) {
        const float fj = __shfl_sync(0xffffffffu, f, j);
        if (d < hd && fj != 0.0f) o += acc[(s0 + j) * hd + d] * fj;  // empty splits leave acc unwritten
      }
    }
    if (d < hd) out[d] = from_f32<T>(o * inv);
  }
}

}  // namespace

void attention_partial(DType type, const AttentionArgs& args, int64_t grid_splits, cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    const dim3 grid(static_cast<unsigned>(args.n_tokens), static_cast<unsigned>(args.kv_heads),
                    static_cast<unsigned>(grid_splits));
    const int64_t group = args.heads / args.kv_heads;
    if (group <= 1) {
      launch_partial<T, 1>(args, grid, stream);
    } else if (group <= 2) {
      launch_partial<T, 2>(args, grid, stream);
    } else if (group <= 4) {
      launch_partial<T, 4>(args, grid, stream);
    } else {
      launch_partial<T, 8>(args, grid, stream);
    }
  });
}

void attention_merge(DType type, const AttentionArgs& args, cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    launch_kernel(attention_merge_kernel<T>, static_cast<unsigned>(args.n_tokens * args.heads), 128, 0, stream, args);
  });
}

void attention(DType type, const AttentionArgs& args, cudaStream_t stream) {
  attention_partial(type, args, args.splits, stream);
  attention_merge(type, args, stream);
}

}  // namespace kernelllm::cuda
