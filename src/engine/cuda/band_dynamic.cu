// The SwiGLU band GEMM with units handed out at run time; see band_dynamic.cuh.
//
// Unit u is pair group u / chunks (gate tiles [g P, g P + P) and the up tiles of the same rows)
// over column chunk u % chunks (its stages [c S / chunks, (c + 1) S / chunks), a stage being
// `segments` x 64 columns). One lane
// of a ninth warp is the producer: it fills the ring's slots in order, each once the 8 computing
// warps have all arrived on its "empty" barrier, with one stage of the unit it is on (one TMA copy
// of the P gate tiles over the stage's segments, one of the up tiles, then one of the tokens, all
// counted on the slot's "full" barrier; 64-column boxes, two copies per 128 columns each, were
// far slower at one or two pairs: NOTES item 39) and the unit and stage in the slot's tag; when a unit's last stage
// is next it takes the unit after it from counters[0] (blocks start on units 0 .. grid - 1, so a
// taken value v means unit grid + v), and past the last unit it tags a slot "end" and arrives on
// its barrier without copies (with the refills on the computing warps' path, slower again). The computing warps are P
// tile-warps x 8 / P k-warps: tile-warp p holds pair p's gate and up sums for all tokens
// (mma.sync m16n8k16 from ldmatrix), k-warp k takes the unit's 32-column steps j with
// j % (8 / P) == k. At a unit's last stage the warps' sums meet in
// shared memory beside the ring (in k order); with one chunk the block writes silu(gate) * up,
// else it writes the sums to partials[group][chunk] and counts the group's chunks on
// counters[2 + group]; the block that counts the last one adds the chunks in order, writes the
// activation and sets the count back to zero. The last block to finish sets counters[0] and [1]
// back to zero, so every call starts from zero (and the next call reads them only after its wait
// for the previous kernel, which completed after this one).
#include <algorithm>
#include <string>

#include "engine/cuda/band_dynamic.cuh"
#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kMaxSegments = 8;  // a stage: 1..8 segments of kTmaBoxCols columns (BandDynamicConfig::segments)
constexpr int kMaxStages = 16;
constexpr int kWarps = 8;                    // computing warps
constexpr int kThreads = (kWarps + 1) * 32;  // and the producer's warp
constexpr int kMaxChunks = 8;
constexpr size_t kSmemBudget = 220 * 1024;
// One pair's sums in the partials and the warps' shared buffer: 2 tiles x NT x 4 x 32 lanes at
// most NT = 4 (32 tokens).
constexpr int kPairSums = 2 * 4 * 4 * 32;

struct Params {
  int inter, cols, n_tokens, groups, chunks, units, stages, st_total, slot_bytes, segs;
  int32_t* counters;
  float* partials;
};

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// The computing warps' own barrier (the producer's warp never joins it).
__device__ __forceinline__ void compute_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kWarps * 32) : "memory");
}

template <class T, int NT, int P>
__global__ void __launch_bounds__(kThreads, 1)
    dyn_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, T* y, Params p) {
  constexpr int XR = NT * 8;
  constexpr int KW = kWarps / P;               // k-warps
  constexpr int kSums = 2 * NT * 4;            // a lane's sums of one pair
  constexpr int kWBox = P * 16 * kTmaBoxCols;  // elements of one segment of a weight box
  constexpr int kOut = P * NT * 4 * 32;        // a unit's (pair, nt, e, lane) entries: a gate and an up sum each
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* const ring = smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024);
  float* const red = reinterpret_cast<float*>(ring + p.stages * p.slot_bytes);  // [KW][P][kSums][32]
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ int tag_unit[kMaxStages], tag_stage[kMaxStages];
  __shared__ int last_flag;

  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const auto stage0 = [&](int u) { return (u % p.chunks) * p.st_total / p.chunks; };
  const auto nst = [&](int u) { return (u % p.chunks + 1) * p.st_total / p.chunks - stage0(u); };
  const auto slot_w = [&](int slot) { return reinterpret_cast<T*>(ring + slot * p.slot_bytes); };
  const auto slot_x = [&](int slot) { return slot_w(slot) + 2 * p.segs * kWBox; };

  if (tid == 0) {
    for (int i = 0; i < p.stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == kWarps) {
    // The producer (one lane): slots in order, each refilled once every computing warp is done with it.
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&wmap) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&xmap) : "memory");
      // A stage: the P gate tiles' box over the stage's segments, the up tiles', the tokens'.
      const auto weights = [&](int slot, int u, int s) {
        const int seg = (stage0(u) + s) * p.segs, row = (u / p.chunks) * P * 16;
        tag_unit[slot] = u;
        tag_stage[slot] = s;
        mbar_expect_tx(&full[slot], static_cast<unsigned>(p.slot_bytes));
        tma_box_segments(slot_w(slot), &wmap, seg, row, &full[slot]);
        tma_box_segments(slot_w(slot) + p.segs * kWBox, &wmap, seg, p.inter + row, &full[slot]);
      };
      const auto tokens = [&](int slot, int u, int s) {
        tma_box_segments(slot_x(slot), &xmap, (stage0(u) + s) * p.segs, 0, &full[slot]);
      };
      // The first unit's weights before the wait (constant); its tokens, and any unit taken, after it.
      int pu = static_cast<int>(blockIdx.x), ps = 0, taken = -1;
      const int first = min(p.stages, nst(pu));
      for (int i = 0; i < first; ++i) weights(i, pu, i);
      wait_for_predecessor();
      for (int i = 0; i < first; ++i) tokens(i, pu, i);
      // Unit pu's stage ps is next; the unit after it is taken once its last stage is next (the
      // counter's answer is needed one slot later).
      const auto take = [&]() {
        taken = atomicAdd(&p.counters[0], 1) + static_cast<int>(gridDim.x);
        if (taken >= p.units) taken = -1;
      };
      const auto advance = [&]() {
        if (++ps == nst(pu)) {
          pu = taken;
          ps = 0;
        }
        if (pu >= 0 && ps == nst(pu) - 1) take();
      };
      ps = first - 1;
      if (ps == nst(pu) - 1) take();
      advance();
      for (int i = first;; ++i) {
        const int slot = i % p.stages;
        if (i >= p.stages) {
          mbar_wait(&empty[slot], static_cast<unsigned>(i / p.stages - 1) & 1u);
          async_proxy_fence();
        }
        if (pu < 0) {
          tag_unit[slot] = -1;
          mbar_arrive(&full[slot]);
          break;
        }
        weights(slot, pu, ps);
        tokens(slot, pu, ps);
        advance();
      }
      // The last block out sets the unit counters back to zero for the next call (every block's
      // taking is over once it has counted itself out).
      __threadfence();
      if (atomicAdd(&p.counters[1], 1) == static_cast<int>(gridDim.x) - 1) {
        p.counters[0] = 0;
        p.counters[1] = 0;
      }
    }
    return;
  }

  wait_for_predecessor();  // (the outputs are written only after the tokens, which follow the wait)
  const int tw = warp % P, ks = warp / P;
  float acc[2][NT][4];
  const auto each_acc = [](auto&& f) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(mt, nt, e);
      }
    }
  };
  each_acc([&](int mt, int nt, int e) { acc[mt][nt][e] = 0.0f; });
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int b_row = lane & 7, b_chunk = lane >> 3;

  for (int i = 0;; ++i) {
    const int slot = i % p.stages;
    mbar_wait(&full[slot], static_cast<unsigned>(i / p.stages) & 1u);
    const int u = tag_unit[slot], s = tag_stage[slot];
    if (u < 0) break;
    const T* sw = slot_w(slot);
    const T* sx = slot_x(slot);
    const int steps = 2 * p.segs;  // 32-column steps in the stage
    for (int kk = ks - (s * steps) % KW; kk < steps; kk += KW) {
      if (kk < 0) continue;
      uint32_t b[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int c = 4 * kk + b_chunk;
        ldmatrix_x4(b[nt], sx + (c / 8) * XR * kTmaBoxCols + swizzled_elem(nt * 8 + b_row, c % 8));
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t a[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = 4 * kk + 2 * h + a_chunk;
          ldmatrix_x4(a[h], sw + (mt * p.segs + c / 8) * kWBox + swizzled_elem(tw * 16 + a_row, c % 8));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          mma<T>(acc[mt][nt], a[0], b[nt][0], b[nt][1]);
          mma<T>(acc[mt][nt], a[1], b[nt][2], b[nt][3]);
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);  // this warp is done with the slot
    if (s != nst(u) - 1) continue;

    // The unit's sums: warps' shares into shared memory, added in k order.
    each_acc([&](int mt, int nt, int e) {
      red[((ks * P + tw) * kSums + (mt * NT + nt) * 4 + e) * 32 + lane] = acc[mt][nt][e];
      acc[mt][nt][e] = 0.0f;
    });
    compute_sync();
    const int group = u / p.chunks, chunk = u % p.chunks;
    // Entry j: pair j / (NT 128), nt, e, lane; its gate and up sums over the k-warps.
    const auto sums = [&](int j, float& g, float& v) {
      const int pr = j / (NT * 128), rest = j % (NT * 128), nt = rest / 128, e = (rest / 32) % 4, ln = rest % 32;
      g = v = 0.0f;
#pragma unroll
      for (int k = 0; k < KW; ++k) {
        g += red[((k * P + pr) * kSums + nt * 4 + e) * 32 + ln];
        v += red[((k * P + pr) * kSums + (NT + nt) * 4 + e) * 32 + ln];
      }
    };
    const auto store = [&](int j, float g, float v) {
      const int pr = j / (NT * 128), rest = j % (NT * 128), nt = rest / 128, e = (rest / 32) % 4, ln = rest % 32;
      const int row = (group * P + pr) * 16 + ln / 4 + (e >= 2 ? 8 : 0);
      const int n = nt * 8 + 2 * (ln % 4) + (e & 1);
      if (row < p.inter && n < p.n_tokens) y[static_cast<int64_t>(n) * p.inter + row] = from_f32<T>(silu_mul(g, v));
    };
    if (p.chunks == 1) {
      for (int j = tid; j < kOut; j += kWarps * 32) {
        float g, v;
        sums(j, g, v);
        store(j, g, v);
      }
      compute_sync();  // red is read before the next unit writes it
      continue;
    }
    float2* const mine = reinterpret_cast<float2*>(p.partials) + (static_cast<int64_t>(group) * p.chunks + chunk) * kOut;
    for (int j = tid; j < kOut; j += kWarps * 32) {
      float g, v;
      sums(j, g, v);
      mine[j] = make_float2(g, v);
    }
    __threadfence();
    compute_sync();
    if (tid == 0) last_flag = atomicAdd(&p.counters[2 + group], 1) == p.chunks - 1;
    compute_sync();
    if (last_flag) {
      __threadfence();
      const float2* const all = reinterpret_cast<const float2*>(p.partials) + static_cast<int64_t>(group) * p.chunks * kOut;
      for (int j = tid; j < kOut; j += kWarps * 32) {
        float g = 0.0f, v = 0.0f;
        for (int c = 0; c < p.chunks; ++c) {
          const float2 q = __ldcg(all + static_cast<int64_t>(c) * kOut + j);
          g += q.x;
          v += q.y;
        }
        store(j, g, v);
      }
      if (tid == 0) p.counters[2 + group] = 0;
    }
    compute_sync();
  }
}

template <class T, int NT, int P>
const void* kernel_for() {
  const auto k = dyn_kernel<T, NT, P>;
  static const bool sized = [&] {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBudget + 1024));
    return true;
  }();
  (void)sized;
  return reinterpret_cast<const void*>(k);
}

template <class T, int NT, int P>
void launch(int blocks, size_t smem, cudaStream_t stream, const CUtensorMap& wmap, const CUtensorMap& xmap, void* y,
            const Params& p) {
  (void)kernel_for<T, NT, P>();
  launch_kernel(dyn_kernel<T, NT, P>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, wmap, xmap,
                static_cast<T*>(y), p);
}

template <class T, int NT>
void launch_p(int pairs, int blocks, size_t smem, cudaStream_t stream, const CUtensorMap& wmap,
              const CUtensorMap& xmap, void* y, const Params& p) {
  switch (pairs) {
    case 1: launch<T, NT, 1>(blocks, smem, stream, wmap, xmap, y, p); break;
    case 2: launch<T, NT, 2>(blocks, smem, stream, wmap, xmap, y, p); break;
    default: launch<T, NT, 4>(blocks, smem, stream, wmap, xmap, y, p); break;
  }
}

template <class T>
void launch_nt(int nt, int pairs, int blocks, size_t smem, cudaStream_t stream, const CUtensorMap& wmap,
               const CUtensorMap& xmap, void* y, const Params& p) {
  switch (nt) {
    case 1: launch_p<T, 1>(pairs, blocks, smem, stream, wmap, xmap, y, p); break;
    case 2: launch_p<T, 2>(pairs, blocks, smem, stream, wmap, xmap, y, p); break;
    case 3: launch_p<T, 3>(pairs, blocks, smem, stream, wmap, xmap, y, p); break;
    default: launch_p<T, 4>(pairs, blocks, smem, stream, wmap, xmap, y, p); break;
  }
}

int64_t groups_of(const BandDynamicConfig& c, int64_t inter) {
  const int64_t per = int64_t{16} * std::max(1, c.pairs);
  return (inter + per - 1) / per;
}

}  // namespace

int64_t band_dynamic_counters(const BandDynamicConfig& config, int64_t inter) { return 2 + groups_of(config, inter); }

int64_t band_dynamic_partials(const BandDynamicConfig& config, int64_t inter) {
  return config.chunks > 1 ? groups_of(config, inter) * config.chunks * std::max(1, config.pairs) * kPairSums : 0;
}

Status band_gemm_swiglu_dynamic(const BandDynamicConfig& config, DType type, const void* w, int64_t inter,
                                int64_t cols, const void* x, int64_t n_tokens, void* y,
                                const BandDynamicScratch& scratch, int sms, cudaStream_t stream) {
  if ((config.pairs != 1 && config.pairs != 2 && config.pairs != 4) || config.chunks < 1 ||
      config.chunks > kMaxChunks || config.segments < 1 || config.segments > kMaxSegments || config.blocks < 0 ||
      sms < 1 ||
      (config.ring_kb != 0 && (config.ring_kb < 32 || config.ring_kb > 220))) {
    return error(ErrorCode::invalid_argument,
                 "band gemm swiglu dynamic layout: expected pairs 1, 2 or 4, chunks 1.." + std::to_string(kMaxChunks) +
                     ", segments 1.." + std::to_string(kMaxSegments) +
                     ", blocks >= 0, ring_kb 0 or 32..220 and 1 or more SMs, found pairs " +
                     std::to_string(config.pairs) + ", chunks " + std::to_string(config.chunks) + ", segments " +
                     std::to_string(config.segments) + ", blocks " +
                     std::to_string(config.blocks) + ", ring_kb " + std::to_string(config.ring_kb) + ", SMs " +
                     std::to_string(sms));
  }
  if (!band_supported(type, cols, n_tokens) || cols % kTmaBoxCols != 0 || inter < 0 || inter > (int64_t{1} << 29)) {
    return error(ErrorCode::invalid_argument,
                 "band gemm swiglu dynamic shape: expected f16/bf16 weights, 0 <= inter <= 2^29, cols a positive "
                 "multiple of 64 and 1.." + std::to_string(kBandMaxTokens) + " tokens, found " +
                     std::string(dtype_name(type)) + ", inter " + std::to_string(inter) + ", cols " +
                     std::to_string(cols) + ", tokens " + std::to_string(n_tokens));
  }
  if (inter == 0) return Status::ok_status();
  if (scratch.counters == nullptr || scratch.counter_count < band_dynamic_counters(config, inter) ||
      (config.chunks > 1 && (scratch.partials == nullptr || scratch.partial_count < band_dynamic_partials(config, inter)))) {
    return error(ErrorCode::invalid_argument,
                 "band gemm swiglu dynamic scratch: expected " + std::to_string(band_dynamic_counters(config, inter)) +
                     " counters and " + std::to_string(band_dynamic_partials(config, inter)) +
                     " partial sums, found " + std::to_string(scratch.counter_count) + " and " +
                     std::to_string(scratch.partial_count));
  }
  const int nt = static_cast<int>((n_tokens + 7) / 8);
  Params p{};
  p.inter = static_cast<int>(inter);
  p.cols = static_cast<int>(cols);
  p.n_tokens = static_cast<int>(n_tokens);
  p.groups = static_cast<int>(groups_of(config, inter));
  p.segs = config.segments;
  const int64_t stage_cols = int64_t{kTmaBoxCols} * p.segs;
  p.st_total = static_cast<int>((cols + stage_cols - 1) / stage_cols);
  p.chunks = std::min(config.chunks, p.st_total);  // every chunk has a stage
  p.units = p.groups * p.chunks;
  p.slot_bytes = p.segs * (2 * config.pairs * 16 + nt * 8) * kTmaBoxCols * 2;
  const size_t red_bytes = static_cast<size_t>(8) * nt * 4 * 2 * 32 * 4;  // KW x P = 8 warps' sums
  const size_t budget = config.ring_kb > 0 ? std::min<size_t>(static_cast<size_t>(config.ring_kb) * 1024,
                                                              kSmemBudget - red_bytes)
                                           : kSmemBudget - red_bytes;
  p.stages = static_cast<int>(std::min<size_t>(budget / static_cast<size_t>(p.slot_bytes), kMaxStages));
  if (p.stages < 2) {
    return error(ErrorCode::invalid_argument,
                 "band gemm swiglu dynamic layout: a stage of " + std::to_string(config.pairs) + " pairs x " +
                     std::to_string(p.segs) + " segments at " + std::to_string(n_tokens) + " tokens is " +
                     std::to_string(p.slot_bytes / 1024) + " KB; two do not fit in the ring's " +
                     std::to_string(budget / 1024) + " KB");
  }
  p.counters = scratch.counters;
  p.partials = scratch.partials;
  const size_t smem = static_cast<size_t>(p.stages) * static_cast<size_t>(p.slot_bytes) + red_bytes + 1024;
  const int blocks = std::min(config.blocks > 0 ? config.blocks : sms, p.units);
  CUtensorMap wmap, xmap;
  if (!tma_map_segments(wmap, type, w, 2 * inter, cols, config.pairs * 16, p.segs) ||
      !tma_map_segments(xmap, type, x, n_tokens, cols, nt * 8, p.segs)) {
    return error(ErrorCode::internal, "band gemm swiglu dynamic: the driver could not describe the weights or "
                                      "tokens as TMA tensors (" + std::to_string(2 * inter) + " x " +
                                          std::to_string(cols) + ")");
  }
  if (type == DType::bf16) {
    launch_nt<__nv_bfloat16>(nt, config.pairs, blocks, smem, stream, wmap, xmap, y, p);
  } else {
    launch_nt<__half>(nt, config.pairs, blocks, smem, stream, wmap, xmap, y, p);
  }
  return Status::ok_status();
}

}  // namespace kernelllm::cuda
