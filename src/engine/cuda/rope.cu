// RoPE and the KV write; see rope.cuh. A row of blocks per token, one item per thread.
#include <type_traits>

#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/rope.cuh"

namespace kernelllm::cuda {
namespace {
// Item i of a token: a rotated pair (head h, dims j and j + half) of its q or k heads for
// i < (heads + kv_heads) * half, else one V element. One item per thread, so a token is one
// round of loads (decode passes are a token or a few: their time is latency); the frequency is
// constant and is loaded before the wait for the previous kernel.
template <class T, class In, bool kParts>
__global__ void rope_kv_kernel(const In* qkv, int64_t heads, int64_t kv_heads, int64_t hd, const int32_t* pos,
                               const int32_t* page_of, const float* inv_freq, T* pool, int64_t layers,
                               int64_t page_tokens, int64_t layer, float* q_out, int parts) {
  const int64_t t = blockIdx.x;
  const int64_t half = hd / 2, q_dim = heads * hd, kv_dim = kv_heads * hd;
  const int64_t i = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  const int64_t pairs = (heads + kv_heads) * half;
  const int64_t h = i / half, j = i % half;
  const float freq = i < pairs ? inv_freq[j] : 0.0f;
  wait_for_predecessor();
  if (i >= pairs + kv_dim) return;
  const In* row = qkv + t * (q_dim + 2 * kv_dim);
  // Element e of the token's row: with parts (kParts), the sum in order of the parts'
  // (band_gemm_parts). A template flag: the single-input instances (prefill, where the kernel is
  // a stream of 30 MB a layer) keep their one load and their registers.
  const int64_t part_stride = static_cast<int64_t>(gridDim.x) * (q_dim + 2 * kv_dim);
  const auto at = [&](int64_t e) {
    if constexpr (kParts) {
      float part[kMaxOutputParts];  // every part's load out before the first add
#pragma unroll
      for (int q = 0; q < kMaxOutputParts; ++q) part[q] = q == 0 || q < parts ? row[q * part_stride + e] : 0.0f;
      float v = part[0];
#pragma unroll
      for (int q = 1; q < kMaxOutputParts; ++q) {
        if (q < parts) v += part[q];
      }
      return v;
    } else {
      return to_f32(row[e]);
    }
  };
  const int32_t p = pos[t];
  const int64_t page = page_of[t];
  T* k_dst = pool + (((page * layers + layer) * 2 + 0) * page_tokens + p % page_tokens) * kv_dim;
  T* v_dst = pool + (((page * layers + layer) * 2 + 1) * page_tokens + p % page_tokens) * kv_dim;
  if (i >= pairs) {
    v_dst[i - pairs] = from_f32<T>(at(q_dim + kv_dim + (i - pairs)));
    return;
  }
  const int64_t src = h * hd;  // k heads follow the q heads in the fused row
  const float2 r = rope_pair(at(src + j), at(src + j + half), p, freq);
  if (h < heads) {
    q_out[t * q_dim + h * hd + j] = r.x;
    q_out[t * q_dim + h * hd + j + half] = r.y;
  } else {
    const int64_t kh = h - heads;
    k_dst[kh * hd + j] = from_f32<T>(r.x);
    k_dst[kh * hd + j + half] = from_f32<T>(r.y);
  }
}
}  // namespace

void rope_write_kv(DType type, DType in_type, const void* qkv, int64_t n_tokens, int64_t heads, int64_t kv_heads,
                   int64_t head_dim, const int32_t* pos, const int32_t* page_of, const float* inv_freq,
                   const KvLayout& kv, int64_t layer, float* q_out, cudaStream_t stream, int in_parts) {
  if (n_tokens == 0) return;
  dispatch_dtype(type, [&](auto d) {
    dispatch_dtype(in_type, [&](auto di) {
      using T = decltype(d);
      using In = decltype(di);
      const int64_t items = (heads + kv_heads) * (head_dim / 2) + kv_heads * head_dim;
      const dim3 grid(static_cast<unsigned>(n_tokens), blocks_for(items, 256));
      auto kernel = rope_kv_kernel<T, In, false>;
      if constexpr (std::is_same_v<In, float>) {  // (parts are fp32)
        if (in_parts > 1) kernel = rope_kv_kernel<T, In, true>;
      }
      launch_kernel(kernel, grid, 256, 0, stream, static_cast<const In*>(qkv), heads, kv_heads, head_dim, pos, page_of,
                    inv_freq, static_cast<T*>(kv.pool), kv.layers, kv.page_tokens, layer, q_out, in_parts);
    });
  });
}

}  // namespace kernelllm::cuda
