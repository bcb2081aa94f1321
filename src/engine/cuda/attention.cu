// Paged GQA attention with split-KV; see attention.cuh. A block of 4 warps handles one
// (token, KV head, split): each warp walks every 4th position with an online softmax for all
// the group's query heads (lane i holds dims i, i+32, ...), the warps merge in shared memory
// and write the split's (max, sum, unnormalized output); a second kernel merges the splits.
#include <cfloat>

#include "engine/cuda/attention.cuh"
#include "engine/cuda/device_types.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kG = static_cast<int>(kMaxAttentionGroup);
constexpr int kD = static_cast<int>(kMaxAttentionHeadDim / 32);

template <class T>
__global__ void __launch_bounds__(kWarps * 32) attention_partial_kernel(AttentionArgs a) {
  const int64_t t = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hd = a.head_dim, group = a.heads / a.kv_heads, kv_dim = a.kv.kv_dim;
  const int64_t n_ctx = a.pos[t] + 1;
  const int64_t chunk = (n_ctx + a.splits - 1) / a.splits;
  const int64_t begin = split * chunk;
  const int64_t end = begin + chunk < n_ctx ? begin + chunk : n_ctx;
  const float scale = rsqrtf(static_cast<float>(hd));

  float q[kG][kD], acc[kG][kD], m[kG], l[kG];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kD; ++i) {
      const int64_t d = lane + 32 * i;
      acc[h][i] = 0.0f;
      q[h][i] = (h < group && d < hd) ? a.q[(t * a.heads + g * group + h) * hd + d] * scale : 0.0f;
    }
  }
  const T* pool = static_cast<const T*>(a.kv.pool);
  const int32_t* table = a.block_table + static_cast<int64_t>(a.seq[t]) * a.table_width;
  const int64_t pt = a.kv.page_tokens;
  for (int64_t p = begin + warp; p < end; p += kWarps) {
    const int64_t page = table[p / pt];
    const T* kp = pool + (((page * a.kv.layers + a.layer) * 2 + 0) * pt + p % pt) * kv_dim + g * hd;
    const T* vp = kp + pt * kv_dim;
    float k[kD], v[kD];
#pragma unroll
    for (int i = 0; i < kD; ++i) {
      const int64_t d = lane + 32 * i;
      k[i] = d < hd ? to_f32(kp[d]) : 0.0f;
      v[i] = d < hd ? to_f32(vp[d]) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      if (h >= group) break;
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kD; ++i) s += q[h][i] * k[i];
      s = warp_sum(s);
      const float m_new = fmaxf(m[h], s);
      const float c = __expf(m[h] - m_new), e = __expf(s - m_new);
      l[h] = l[h] * c + e;
#pragma unroll
      for (int i = 0; i < kD; ++i) acc[h][i] = acc[h][i] * c + e * v[i];
      m[h] = m_new;
    }
  }

  __shared__ float s_ml[kWarps][kG][2];
  __shared__ float s_acc[kWarps][kG][kMaxAttentionHeadDim];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    if (h >= group) break;
    if (lane == 0) {
      s_ml[warp][h][0] = m[h];
      s_ml[warp][h][1] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kD; ++i) {
      if (lane + 32 * i < hd) s_acc[warp][h][lane + 32 * i] = acc[h][i];
    }
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

template <class T>
__global__ void attention_merge_kernel(AttentionArgs a) {
  const int64_t th = blockIdx.x;  // token * heads + head
  const int64_t hd = a.head_dim;
  const float* ml = a.partial_ml + th * a.splits * 2;
  float mx = -FLT_MAX;
  for (int64_t s = 0; s < a.splits; ++s) {
    if (ml[s * 2 + 1] > 0.0f) mx = fmaxf(mx, ml[s * 2]);
  }
  float total = 0.0f;
  for (int64_t s = 0; s < a.splits; ++s) {
    if (ml[s * 2 + 1] > 0.0f) total += ml[s * 2 + 1] * __expf(ml[s * 2] - mx);
  }
  const float inv = 1.0f / total;
  T* out = static_cast<T*>(a.out) + th * hd;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < a.splits; ++s) {
      if (ml[s * 2 + 1] > 0.0f) o += a.partial_acc[(th * a.splits + s) * hd + d] * __expf(ml[s * 2] - mx);
    }
    out[d] = from_f32<T>(o * inv);
  }
}

}  // namespace

void attention(DType type, const AttentionArgs& args, cudaStream_t stream) {
  if (args.n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    const dim3 grid(static_cast<unsigned>(args.n_tokens), static_cast<unsigned>(args.kv_heads),
                    static_cast<unsigned>(args.splits));
    attention_partial_kernel<T><<<grid, kWarps * 32, 0, stream>>>(args);
    attention_merge_kernel<T><<<static_cast<unsigned>(args.n_tokens * args.heads), 128, 0, stream>>>(args);
  });
}

}  // namespace kernelllm::cuda
