// The band GEMM; see band_gemm.cuh.
//
// Work: the matrix's 16-row tiles go in runs of `tiles` to the grid's clusters (cluster c: tiles
// [c tiles, (c + 1) tiles), the last run perhaps past the matrix, where TMA writes zeros); the C
// blocks of a cluster take the same tiles and split the columns' stages of 128 (rank r: stages
// [rS/C, (r+1)S/C)). In the parts form (band_gemm_parts) the C blocks of a run are not a
// cluster: rank r writes its sums as output part r and the consumer adds the parts.
//
// A block streams its stages through a ring in shared memory: per stage,
// thread 0 asks TMA for two boxes of 64 columns x all the band's rows and two of the token rows
// (rows past the tokens come as zeros), all counted on the stage's mbarrier. Weights are
// constant, so the first stages' weight copies go out before the wait for the previous kernel
// (launch.cuh); the tokens it wrote only after.
//
// Warp w is tile-warp w % tile_warps (tiles_per_warp tiles of 16 rows, all tokens; mma.sync
// m16n8k16, A = weights, B = tokens, fp32 accumulators) and takes the stage's 32-column steps
// s with s % k_warps == w / tile_warps. At the end the warps of a tile-warp add their sums in
// order through shared memory (over the ring); without a cluster the first of them writes the
// outputs from its accumulators, with one every block's sums go to its shared memory and rank r
// adds tiles t with t % C == r over the cluster in rank order (distributed shared memory). The
// sums never depend on timing. Where the time goes (H100, 20 tokens): the first stage lands 5-10
// us after the start, behind every SM's whole first ring; the slowest SM sets the end; a cluster
// reduction costs 3.5-4 us. So the plain form serves only gate_up (docs/cuda-engine.md).
//
// The SwiGLU form (band_gemm_swiglu, template parameter Glu) runs the same way over pairs: a
// cluster's run is gate tiles and the up tiles of the same rows (a box of each per 64 columns),
// and each warp takes one pair, so the thread that holds a gate sum holds its up sum too and
// writes silu(gate) * up (k = 20: ~0.06 ms a step against the band GEMM and a swiglu kernel).
#include <cooperative_groups.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"
#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kBK = kBandStageCols;          // columns per stage
constexpr int kBoxes = kBK / kTmaBoxCols;    // boxes per stage, of the weights and of the tokens
constexpr int kMaxStages = 16;
constexpr size_t kSmemBudget = 220 * 1024;  // the ring, of the H100's 227 KB per block
static_assert(kSmemBudget + 1024 == kBandSmemBytes, "shapes.h's kBandSmemBytes is what the kernel asks");

__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::this_cluster().sync();
#else
  __trap();  // clusters need compute capability 9.0 (band_supported callers check)
#endif
}

// The sum over the cluster's blocks, in rank order, of the float at `p` in each block's shared memory.
__device__ __forceinline__ float cluster_sum(float* p, int cluster) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cl = cg::this_cluster();
  for (int r = 0; r < cluster; ++r) v += *cl.map_shared_rank(p, r);
#else
  (void)p;
  (void)cluster;
  __trap();  // as cluster_barrier
#endif
  return v;
}

// rows: the output's rows (with Glu, the gate rows; the up rows follow them in W). tiles_total:
// the matrix's 16-row tiles (with Glu, its gate tiles); tiles: a cluster's (with Glu, its gate and
// up tiles together).
struct Params {
  int64_t rows, cols;
  int n_tokens, tiles_total, tiles, cluster, parts, tile_cap, k_warps, stages;
  bool accumulate;
  bool evict_first;  // weights_evict_first()
};

// Glu (MT = 2, Y = T): the output is silu(x . Wg^T) * (x . Wu^T) for W = [Wg; Wu]. A cluster's run
// is `tiles / 2` gate tiles and the up tiles of the same rows, one box of each per 64 columns;
// mt = 0 is a warp's gate tile, mt = 1 the matching up tile, so a thread holds both of each pair.
template <class T, class Y, int NT, int MT, bool Glu>
__global__ void __launch_bounds__(256, 1)
    band_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, Y* y, Params p) {
  static_assert(!Glu || (MT == 2 && std::is_same_v<Y, T>), "the SwiGLU form pairs two tiles and writes T");
  constexpr int XR = NT * 8;  // token rows
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1,024 bytes: the ring starts on such a boundary.
  unsigned char* const ring = align_1024(smem_raw);
  __shared__ __align__(8) uint64_t full[kMaxStages];  // stage slot s has landed (phase per fill)

  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    tma_prefetch_map(&wmap);
    tma_prefetch_map(&xmap);
  }
  const int tile_warps = p.tile_cap / MT;
  const int tw = warp % tile_warps, ks = warp / tile_warps;
  // The blocks of a run split its columns: a cluster's (added through distributed shared memory)
  // or the parts' (each writes its own output); one of the two counts is 1.
  const int split = p.cluster * p.parts;
  const int cl = static_cast<int>(blockIdx.x) / split, rank = static_cast<int>(blockIdx.x) % split;
  // The cluster's tiles (the last cluster's may run past the matrix: TMA writes zeros there, or
  // with Glu the gate box reads up rows, whose sums are never stored).
  const int run = Glu ? p.tiles / 2 : p.tiles;
  const int t0 = cl * run, ntiles = min(run, p.tiles_total - t0);
  const int st_total = static_cast<int>((p.cols + kBK - 1) / kBK);
  const int s0 = rank * st_total / split, nst = (rank + 1) * st_total / split - s0;
  // A stage: box j (columns 64j .. 64j + 63) of the cluster's 16 x tiles weight rows, then of the tokens.
  const int w_box_elems = p.tiles * 16 * kTmaBoxCols;
  const int slot_bytes = (kBoxes * w_box_elems + kBoxes * XR * kTmaBoxCols) * 2;
  const auto slot_w = [&](int slot) { return reinterpret_cast<T*>(ring + slot * slot_bytes); };
  const auto slot_x = [&](int slot) { return slot_w(slot) + kBoxes * w_box_elems; };

  // Thread 0 only: stage i's weight boxes (and the whole stage's byte count), then its token boxes.
  const auto load_weights = [&](int i) {
    const int slot = i % p.stages, col = (s0 + i) * kBK;
    mbar_expect_tx(&full[slot], static_cast<unsigned>(slot_bytes));
#pragma unroll
    for (int j = 0; j < kBoxes; ++j) {
      tma_box_once(slot_w(slot) + j * w_box_elems, &wmap, col + j * kTmaBoxCols, t0 * 16, &full[slot],
                   p.evict_first);
      if constexpr (Glu) {
        tma_box_once(slot_w(slot) + j * w_box_elems + run * 16 * kTmaBoxCols, &wmap, col + j * kTmaBoxCols,
                     static_cast<int>(p.rows) + t0 * 16, &full[slot], p.evict_first);
      }
    }
  };
  const auto load_tokens = [&](int i) {
    const int slot = i % p.stages, col = (s0 + i) * kBK;
#pragma unroll
    for (int j = 0; j < kBoxes; ++j) tma_box(slot_x(slot) + j * XR * kTmaBoxCols, &xmap, col + j * kTmaBoxCols, 0, &full[slot]);
  };

  if (tid == 0) {
    for (int i = 0; i < p.stages; ++i) mbar_init(&full[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  const int first = min(p.stages, nst);
  if (tid == 0) {
    for (int i = 0; i < first; ++i) load_weights(i);
  }
  wait_for_predecessor();
  if (tid == 0) {
    for (int i = 0; i < first; ++i) load_tokens(i);
  }

  float acc[MT][NT][4];
  // f(mt, nt, e) for every accumulator of this thread.
  const auto each_acc = [](auto&& f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) f(mt, nt, e);
      }
    }
  };
  each_acc([&](int mt, int nt, int e) { acc[mt][nt][e] = 0.0f; });
  // Lane l addresses row l % 8 of ldmatrix matrix l / 8: rows + 8 for matrices 1 and 3 of the
  // weights, chunk + 1 for 2 and 3; the tokens' four matrices are four chunks in a row.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int b_row = lane & 7, b_chunk = lane >> 3;

  for (int i = 0; i < nst; ++i) {
    const int slot = i % p.stages;
    mbar_wait(&full[slot], static_cast<unsigned>(i / p.stages) & 1u);
    const T* sw = slot_w(slot);
    const T* sx = slot_x(slot);
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {  // 32 columns: chunks 4kk .. 4kk + 3, two mma k-steps
      if (kk % p.k_warps != ks) continue;
      uint32_t b[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int c = 4 * kk + b_chunk;
        ldmatrix_x4(b[nt], sx + (c / 8) * XR * kTmaBoxCols + swizzled_elem(nt * 8 + b_row, c % 8));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int tl = Glu ? tw : tw * MT + mt;  // the tile in the run (Glu: the pair)
        const int box_tile = Glu ? mt * run + tw : tl;  // its rows in the stage's boxes
        if (tl >= ntiles) continue;
        uint32_t a[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          const int c = 4 * kk + 2 * s + a_chunk;
          ldmatrix_x4(a[s], sw + (c / 8) * w_box_elems + swizzled_elem(box_tile * 16 + a_row, c % 8));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          mma<T>(acc[mt][nt], a[0], b[nt][0], b[nt][1]);
          mma<T>(acc[mt][nt], a[1], b[nt][2], b[nt][3]);
        }
      }
    }
    __syncthreads();  // every warp is done with the slot
    if (tid == 0 && i + p.stages < nst) {
      async_proxy_fence();  // ldmatrix read it (generic proxy); TMA writes it (async proxy)
      load_weights(i + p.stages);
      load_tokens(i + p.stages);
    }
  }
  __syncthreads();  // (no stages: the ring was never written) every copy has landed and been read

  // The warps of a tile-warp add their column shares in order k = 0, 1, ... (shares 1.. through
  // shared memory over the ring: part[k - 1][tile][nt][e][lane]).
  float* const part = reinterpret_cast<float*>(ring);
  const int per_k = p.tile_cap * NT * 4 * 32;
  const auto at = [&](int mt, int nt, int e) { return (((tw * MT + mt) * NT + nt) * 4 + e) * 32 + lane; };
  if (p.k_warps > 1) {
    if (ks > 0) each_acc([&](int mt, int nt, int e) { part[(ks - 1) * per_k + at(mt, nt, e)] = acc[mt][nt][e]; });
    __syncthreads();
    for (int k = 1; ks == 0 && k < p.k_warps; ++k) {
      each_acc([&](int mt, int nt, int e) { acc[mt][nt][e] += part[(k - 1) * per_k + at(mt, nt, e)]; });
    }
  }
  Y* const y_part = y + (p.parts > 1 ? int64_t{rank} * p.n_tokens * p.rows : 0);  // (parts: fresh fp32)
  const auto store = [&](int64_t row, int n, float v) {
    Y* out = y_part + int64_t{n} * p.rows + row;
    if constexpr (std::is_same_v<Y, float>) {
      *out = p.accumulate ? *out + v : v;
    } else {
      *out = from_f32<Y>(v);
    }
  };
  if (p.cluster == 1) {
    // Straight from the accumulators: rows g and g + 8 of the tile, tokens 2q and 2q + 1 (lane 4g + q).
    if (ks == 0) {
      each_acc([&](int mt, int nt, int e) {
        const int tl = Glu ? tw : tw * MT + mt;
        const int64_t row = int64_t{t0 + tl} * 16 + lane / 4 + (e >= 2 ? 8 : 0);
        const int n = nt * 8 + 2 * (lane % 4) + (e & 1);
        if (tl >= ntiles || row >= p.rows || n >= p.n_tokens) return;
        if constexpr (Glu) {
          if (mt == 0) store(row, n, silu_mul(acc[0][nt][e], acc[MT - 1][nt][e]));
        } else {
          store(row, n, acc[mt][nt][e]);
        }
      });
    }
  } else {
    // Across the cluster: each block's sums to the start of its ring (after everyone read the
    // shares), then rank r adds tiles t with t % C == r over the cluster in rank order.
    __syncthreads();
    if (ks == 0) each_acc([&](int mt, int nt, int e) { part[at(mt, nt, e)] = acc[mt][nt][e]; });
    cluster_barrier();  // every block's sums are in its shared memory
    // Element j: tile j / (16 XR) (Glu: the pair), token (j / 16) % XR, row j % 16 of the tile
    // (16 rows of a token in a row for the stores).
    const int out_tiles = Glu ? p.tile_cap / 2 : p.tile_cap;
    for (int j = tid; j < out_tiles * XR * 16; j += static_cast<int>(blockDim.x)) {
      const int tl = j / (XR * 16), n = j / 16 % XR, r16 = j % 16;
      if (tl >= ntiles || tl % p.cluster != rank || n >= p.n_tokens) continue;
      const int64_t row = int64_t{t0 + tl} * 16 + r16;
      if (row >= p.rows) continue;
      // The element in part[] of a tile's sums (stored by at(): Glu pair tl's gate and up as 2tl, 2tl + 1).
      const auto sum_of = [&](int stored) {
        const int idx = ((stored * NT + n / 8) * 4 + (r16 / 8) * 2 + (n & 1)) * 32 + (r16 % 8) * 4 + (n % 8) / 2;
        return cluster_sum(part + idx, p.cluster);
      };
      if constexpr (Glu) {
        store(row, n, silu_mul(sum_of(2 * tl), sum_of(2 * tl + 1)));
      } else {
        store(row, n, sum_of(tl));
      }
    }
    cluster_barrier();  // the others have read this block's shared memory
  }
}

using KernelPtr = const void*;

template <class T, class Y, int NT, int MT, bool Glu>
KernelPtr kernel_ptr() {
  allow_dynamic_smem<band_kernel<T, Y, NT, MT, Glu>>(kSmemBudget + 1024);
  return reinterpret_cast<KernelPtr>(band_kernel<T, Y, NT, MT, Glu>);
}

// Calls f(band_kernel<T, Y, NT, MT, Glu>, its pointer) for the runtime choices (glu: Y = T, MT = 2).
template <class F>
void visit_kernel(DType type, DType y_type, int nt, int mt, bool glu, F&& f) {
  const auto with_t = [&](auto t) {
    using T = decltype(t);
    const auto with_y = [&](auto yv) {
      using Y = decltype(yv);
      const auto with_nt = [&](auto ntc) {
        constexpr int NT = decltype(ntc)::value;
        if constexpr (std::is_same_v<Y, T>) {
          if (glu) {
            f(band_kernel<T, T, NT, 2, true>, kernel_ptr<T, T, NT, 2, true>());
            return;
          }
        }
        if (mt == 2) {
          f(band_kernel<T, Y, NT, 2, false>, kernel_ptr<T, Y, NT, 2, false>());
        } else {
          f(band_kernel<T, Y, NT, 1, false>, kernel_ptr<T, Y, NT, 1, false>());
        }
      };
      switch (nt) {
        case 1: with_nt(std::integral_constant<int, 1>{}); break;
        case 2: with_nt(std::integral_constant<int, 2>{}); break;
        case 3: with_nt(std::integral_constant<int, 3>{}); break;
        default: with_nt(std::integral_constant<int, 4>{}); break;
      }
    };
    if (y_type == DType::f32 && !glu) {
      with_y(float{});
    } else {
      with_y(T{});
    }
  };
  if (type == DType::bf16) {
    with_t(__nv_bfloat16{});
  } else {
    with_t(__half{});
  }
}

// Clusters of `cluster` blocks of the kernel that can be resident at once (cached per kernel and size).
int active_clusters(KernelPtr kernel, int cluster, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<KernelPtr, int, int, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, cluster, threads, smem);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {static_cast<unsigned>(cluster), 1, 1};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem;
  config.attrs = &attr;
  config.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  cache.emplace(key, n);
  return n;
}

// The layout for at most `most` clusters of `cluster` blocks (more where the tiles need them),
// without the occupancy check: every cluster takes the same number of tiles (the last perhaps
// fewer), so the grid has as many clusters as that needs. With glu, `units` are the gate tiles,
// each taken with its up tile by one warp.
BandLayout layout_for(int cluster, int64_t most, int64_t units, int nt, size_t budget, bool glu) {
  BandLayout l;
  l.cluster = cluster;
  const int per = glu ? kBandMaxTiles / 2 : kBandMaxTiles;
  const int run = static_cast<int>(std::min<int64_t>(per, (units + most - 1) / most));
  l.tiles = glu ? 2 * run : run;
  l.clusters = static_cast<int>((units + run - 1) / run);
  l.tiles_per_warp = glu || l.tiles > 8 ? 2 : 1;
  l.tile_warps = (l.tiles + l.tiles_per_warp - 1) / l.tiles_per_warp;
  l.k_warps = l.tile_warps * 4 <= 8 ? 4 : l.tile_warps * 2 <= 8 ? 2 : 1;
  const size_t slot = (static_cast<size_t>(l.tiles) * 16 + static_cast<size_t>(nt) * 8) * kBoxes * kTmaBoxCols * 2;
  l.stages = static_cast<int>(std::clamp<size_t>(budget / slot, 2, kMaxStages));
  l.smem = static_cast<size_t>(l.stages) * slot + 1024;
  return l;
}

}  // namespace


BandLayout band_layout(const BandConfig& config, DType type, int64_t rows, int64_t cols, int64_t n_tokens, int sms,
                       bool swiglu) {
  const int64_t units = ((swiglu ? rows / 2 : rows) + 15) / 16;
  const int nt = static_cast<int>((n_tokens + 7) / 8);
  const int max_blocks = config.blocks > 0 ? config.blocks : sms;
  const size_t budget = config.ring_kb > 0 ? static_cast<size_t>(config.ring_kb) * 1024 : kSmemBudget;
  BandLayout best;
  double best_cost = 0;
  for (int cluster : {1, 2, 4}) {
    if (config.cluster != 0 && config.cluster != cluster) continue;
    int most = std::max(1, max_blocks / cluster);
    BandLayout l = layout_for(cluster, most, units, nt, budget, swiglu);
    // Clusters past what fits at once would run in a second wave: fewer, larger ones instead
    // (which may need more shared memory, so ask again).
    for (int round = 0; cluster > 1 && round < 3; ++round) {
      int fit = 0;  // the fp32-output instance stands for both: one block per SM either way
      visit_kernel(type, DType::f32, nt, l.tiles_per_warp, false, [&](auto, KernelPtr k) {
        fit = active_clusters(k, cluster, l.tile_warps * l.k_warps * 32, l.smem);
      });
      if (fit == 0) {
        if (config.cluster != 0) return BandLayout{};  // not launchable as asked
        l.clusters = 0;
        break;
      }
      if (fit >= std::min(most, l.clusters)) break;
      most = fit;
      l = layout_for(cluster, most, units, nt, budget, swiglu);
    }
    if (l.clusters == 0) continue;
    const int active = most;
    // A block's bytes: its weights, and its token rows (from L2, counted at half), times the waves;
    // the cluster's two barriers and the reads of distributed shared memory at 15% more.
    const int64_t waves = (l.clusters + active - 1) / active;
    const double span = static_cast<double>((cols + kBK - 1) / kBK) / cluster;
    const double cost = static_cast<double>(waves) * (l.tiles * 16 + nt * 4) * span * (cluster > 1 ? 1.15 : 1.0);
    if (best.clusters == 0 || cost < best_cost) {
      best = l;
      best_cost = cost;
    }
  }
  return best;
}

BandLayout band_parts_layout(const BandConfig& config, int64_t rows, int64_t n_tokens, int sms, int parts) {
  // One block per SM at either dtype and any width: without clusters no occupancy query is needed.
  if (parts < 1 || parts > kBandMaxParts) return BandLayout{};
  const int64_t units = (rows + 15) / 16;
  const int nt = static_cast<int>((n_tokens + 7) / 8);
  const int max_blocks = config.blocks > 0 ? config.blocks : sms;
  const size_t budget = config.ring_kb > 0 ? static_cast<size_t>(config.ring_kb) * 1024 : kSmemBudget;
  BandLayout l = layout_for(1, std::max(1, max_blocks / parts), units, nt, budget, false);
  l.parts = parts;
  return l;
}

int band_parts_for(const BandConfig& config, int64_t rows, int64_t cols, int64_t n_tokens, int sms) {
  // A block's stages times its rows per stage (weights, and the token rows from L2 at half), over
  // the waves, plus a share for each part the consumer reads back (a 16-row stage's worth); at
  // most 4 parts: down at 8 (the cost's pick) gave 6.60-6.65 ms a k = 20 step on the H100
  // against 6.52-6.55 at 4, the consumer's reads and the next kernel's early
  // fill costing more than the longer runs give.
  constexpr int kMostChosen = 4;
  const int nt = static_cast<int>((n_tokens + 7) / 8);
  const int64_t stages = (cols + kBK - 1) / kBK;
  const int max_blocks = config.blocks > 0 ? config.blocks : sms;
  int best = 1;
  double best_cost = 0;
  for (int parts = 1; parts <= kMostChosen; ++parts) {
    const BandLayout l = band_parts_layout(config, rows, n_tokens, sms, parts);
    const int64_t blocks = int64_t{l.clusters} * parts;
    const int64_t waves = (blocks + max_blocks - 1) / max_blocks;
    const int64_t per_block = (l.tiles * 16 + nt * 4) * ((stages + parts - 1) / parts);
    const double cost = static_cast<double>(waves * per_block) + 16.0 * parts;
    if (parts == 1 || cost < best_cost) {
      best = parts;
      best_cost = cost;
    }
  }
  return best;
}

namespace {

// What band_gemm and band_gemm_swiglu both check: the layout asked for and the shape.
Status check_request(const BandConfig& config, DType type, int64_t rows, int64_t cols, int64_t n_tokens, int sms,
                     const char* what) {
  if (config.cluster != 0 && config.cluster != 1 && config.cluster != 2 && config.cluster != 4) {
    return error(ErrorCode::invalid_argument, std::string(what) +
                                                  " layout: expected 0 (chosen), 1, 2 or 4 blocks per cluster, found " +
                                                  std::to_string(config.cluster));
  }
  if (config.blocks < 0 || sms < 1 || (config.ring_kb != 0 && (config.ring_kb < 32 || config.ring_kb > 220))) {
    return error(ErrorCode::invalid_argument,
                 std::string(what) +
                     " layout: expected blocks >= 0, ring_kb 0 or 32..220 and 1 or more SMs, found blocks " +
                     std::to_string(config.blocks) + ", ring_kb " + std::to_string(config.ring_kb) + ", SMs " +
                     std::to_string(sms));
  }
  if (!band_supported(type, cols, n_tokens) || rows < 0 || rows > (int64_t{1} << 30)) {
    return error(ErrorCode::invalid_argument,
                 std::string(what) +
                     " shape: expected f16/bf16 weights, 0 <= rows <= 2^30, cols a positive multiple of 8 and 1.." +
                     std::to_string(kBandMaxTokens) + " tokens, found " + std::string(dtype_name(type)) + ", rows " +
                     std::to_string(rows) + ", cols " + std::to_string(cols) + ", tokens " + std::to_string(n_tokens));
  }
  return Status::ok_status();
}

// Lays out and launches a checked request: W has w_rows rows (with swiglu, 2 x the output's);
// parts > 0: band_gemm_parts' form.
Status launch_band(const BandConfig& config, DType type, const void* w, int64_t w_rows, int64_t cols, const void* x,
                   int64_t n_tokens, void* y, DType y_type, bool accumulate, bool swiglu, int sms, cudaStream_t stream,
                   int parts = 0) {
  const char* what = swiglu ? "band gemm swiglu" : parts > 0 ? "band gemm parts" : "band gemm";
  const BandLayout l = parts > 0 ? band_parts_layout(config, w_rows, n_tokens, sms, parts)
                                 : band_layout(config, type, w_rows, cols, n_tokens, sms, swiglu);
  if (l.clusters == 0) {
    return error(ErrorCode::invalid_argument, std::string(what) + " layout: clusters of " +
                                                  std::to_string(config.cluster) +
                                                  " blocks of this size do not fit on the device");
  }
  const int nt = static_cast<int>((n_tokens + 7) / 8);
  const int box_rows = (swiglu ? l.tiles / 2 : l.tiles) * 16;
  CUtensorMap wmap, xmap;
  if (!tma_map_2d(wmap, type, w, w_rows, cols, box_rows) || !tma_map_2d(xmap, type, x, n_tokens, cols, nt * 8)) {
    return error(ErrorCode::internal, std::string(what) +
                                          ": the driver could not describe the weights or tokens as TMA tensors (" +
                                          std::to_string(w_rows) + " x " + std::to_string(cols) + ")");
  }
  Params p{};
  p.rows = swiglu ? w_rows / 2 : w_rows;
  p.cols = cols;
  p.n_tokens = static_cast<int>(n_tokens);
  p.tiles_total = static_cast<int>((p.rows + 15) / 16);
  p.tiles = l.tiles;
  p.cluster = l.cluster;
  p.parts = l.parts;
  p.tile_cap = l.tile_warps * l.tiles_per_warp;
  p.k_warps = l.k_warps;
  p.stages = l.stages;
  p.accumulate = accumulate;
  p.evict_first = weights_evict_first();
  visit_kernel(type, y_type, nt, l.tiles_per_warp, swiglu,
               [&]<class Y>(void (*kernel)(CUtensorMap, CUtensorMap, Y*, Params), KernelPtr) {
                 launch_cluster_kernel(kernel, dim3(static_cast<unsigned>(l.clusters * l.cluster * l.parts)),
                                       dim3(static_cast<unsigned>(l.tile_warps * l.k_warps * 32)), l.smem,
                                       static_cast<unsigned>(l.cluster), stream, wmap, xmap, static_cast<Y*>(y), p);
               });
  return Status::ok_status();
}

}  // namespace

Status band_gemm(const BandConfig& config, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
                 int64_t n_tokens, void* y, DType y_type, bool accumulate, int sms, cudaStream_t stream) {
  KLLM_RETURN_IF_ERROR(check_request(config, type, rows, cols, n_tokens, sms, "band gemm"));
  if (y_type != DType::f32 && (y_type != type || accumulate)) {
    return error(ErrorCode::invalid_argument,
                 "band gemm output: expected f32 (fresh or accumulated) or the weights' dtype (fresh), found " +
                     std::string(dtype_name(y_type)) + (accumulate ? " accumulated" : ""));
  }
  if (rows == 0) return Status::ok_status();
  return launch_band(config, type, w, rows, cols, x, n_tokens, y, y_type, accumulate, false, sms, stream);
}

Status band_gemm_parts(const BandConfig& config, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
                       int64_t n_tokens, float* parts, int n_parts, int sms, cudaStream_t stream) {
  KLLM_RETURN_IF_ERROR(check_request(config, type, rows, cols, n_tokens, sms, "band gemm parts"));
  if (n_parts < 1 || n_parts > kBandMaxParts) {
    return error(ErrorCode::invalid_argument, "band gemm parts: expected 1.." + std::to_string(kBandMaxParts) +
                                                  " parts, found " + std::to_string(n_parts));
  }
  if (config.cluster > 1) {
    return error(ErrorCode::invalid_argument, "band gemm parts layout: the parts are not a cluster (cluster 0 or 1)");
  }
  if (rows == 0) return Status::ok_status();
  return launch_band(config, type, w, rows, cols, x, n_tokens, parts, DType::f32, false, false, sms, stream, n_parts);
}

Status band_gemm_swiglu(const BandConfig& config, DType type, const void* w, int64_t inter, int64_t cols,
                        const void* x, int64_t n_tokens, void* y, int sms, cudaStream_t stream) {
  // W's rows (2 x inter) are checked as the plain GEMM's are.
  KLLM_RETURN_IF_ERROR(check_request(config, type, 2 * inter, cols, n_tokens, sms, "band gemm swiglu"));
  if (inter == 0) return Status::ok_status();
  return launch_band(config, type, w, 2 * inter, cols, x, n_tokens, y, type, false, true, sms, stream);
}

}  // namespace kernelllm::cuda
