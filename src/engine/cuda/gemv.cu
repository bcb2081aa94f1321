// The decode GEMV; see gemv.cuh. gemv() runs the split-row kernel: a block of 256 threads is
// 8 / W groups of W warps, each group computes R rows; thread t of a group takes the row's 16-byte
// chunks t, t + 32W, ... and, per batch, loads its chunk for all R rows at once (8 loads in flight,
// L1 bypassed), then the x chunk (once for the R rows, L1-cached: every block of the SM reads it),
// then sums per warp by shuffles and across the group's warps through shared memory. The first
// batch of weight loads is issued before the kernel waits for its predecessor (launch.cuh).
#include <algorithm>
#include <string>
#include <type_traits>

#include "engine/cuda/common.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kUnroll = 8;  // 16-byte weight loads in flight per thread (both kernels)
// gemv_config halves rows_per_group while the grid has fewer blocks than this (about four per SM
// of an H100), so the small projections (o: 4,096 rows) still fill the GPU.
constexpr int64_t kMinBlocks = 512;

// --- the previous kernel: one warp per row, x re-read per row (bench and tests only) ----------
template <class T, int N>
__global__ void __launch_bounds__(kThreads) gemv_warp_kernel(const T* w, int64_t rows, int64_t cols, const T* x,
                                                             float* y) {
  constexpr int V = Vec16<T>::kN;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* wr = w + row * cols;
  float acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0.0f;
  constexpr int64_t kStep = 32 * V;
  int64_t c = lane * V;
  for (; c + (kUnroll - 1) * kStep < cols; c += kUnroll * kStep) {
    float wv[kUnroll][V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load16(wr + c + u * kStep, wv[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xv[V];
        load16(x + n * cols + c + u * kStep, xv);
#pragma unroll
        for (int i = 0; i < V; ++i) acc[n] += wv[u][i] * xv[i];
      }
    }
  }
  for (; c < cols; c += kStep) {
    float wv[V];
    load16(wr + c, wv);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float xv[V];
      load16(x + n * cols + c, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[n] += wv[i] * xv[i];
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float s = warp_sum(acc[n]);
    if (lane == 0) y[n * rows + row] = s;
  }
}

// --- the split-row kernel ----------------------------------------------------------------------

template <class T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kN; ++i) out[i] = to_f32(e[i]);
}

// Where a group's rows come from and where their sums go. A group's R row slots start at slot
// `first` = group index * R; row(first, r) is the matrix row of slot r, valid(first, r) whether
// it exists. store() is called once per (row, token) with the row's sum, or with kPaired (R even)
// once per pair of slots (r, r + 1) with both sums.
struct PlainOut {  // y[n, rows], fp32
  float* y;
  int64_t rows;
  static constexpr bool kPaired = false;
  __device__ int64_t row(int64_t first, int r) const { return first + r; }
  __device__ bool valid(int64_t first, int r) const { return first + r < rows; }
  __device__ void store(int64_t first, int r, int n, float s, float) const { y[n * rows + first + r] = s; }
};

// Pair i of a gate_up matrix: gate row i and up row inter + i; act[n, inter] = silu(gate) * up.
template <class T>
struct SwigluOut {
  T* act;
  int64_t inter;
  static constexpr bool kPaired = true;
  __device__ int64_t row(int64_t first, int r) const { return first / 2 + r / 2 + (r % 2) * inter; }
  __device__ bool valid(int64_t first, int r) const { return first / 2 + r / 2 < inter; }
  __device__ void store(int64_t first, int r, int n, float g, float u) const {
    act[n * inter + first / 2 + r / 2] = from_f32<T>(silu_mul(g, u));
  }
};

// R rows per group, N tokens; warps_per_row (W) in {1, 2, 4, 8}; Out as above. No thread returns
// early: all reach the __syncthreads before the cross-warp sum.
template <class T, int N, int R, class Out>
__global__ void __launch_bounds__(kThreads) gemv_split_kernel(const T* __restrict__ w, int64_t cols,
                                                              const T* __restrict__ x, Out out, int warps_per_row,
                                                              bool evict_first) {
  static_assert(!Out::kPaired || R % 2 == 0, "a paired output takes whole pairs");
  constexpr int V = Vec16<T>::kN;
  constexpr int U = kUnroll / R;  // chunk positions per batch; U * R loads in flight
  static_assert(U >= 1 && U * R == kUnroll, "R must divide kUnroll");
  __shared__ float partial[kWarpsPerBlock][R][N];

  const int tpg = 32 * warps_per_row;  // threads per group
  const int groups = kWarpsPerBlock / warps_per_row;
  const int group = static_cast<int>(threadIdx.x) / tpg;
  const int t = static_cast<int>(threadIdx.x) % tpg;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * groups + group) * R;
  const int64_t chunks = cols / V;

  const T* wr[R];
  bool valid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    valid[r] = out.valid(row0, r);
    wr[r] = w + (valid[r] ? out.row(row0, r) : 0) * cols;
  }
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int n = 0; n < N; ++n) acc[r][n] = 0.0f;
  }

  const int64_t stride = static_cast<int64_t>(U) * tpg;
  const uint64_t policy = evict_first ? evict_first_policy() : 0;
  uint4 raw[U][R];
  auto load_batch = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k = base + static_cast<int64_t>(u) * tpg;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        raw[u][r] = (valid[r] && k < chunks) ? load_stream(wr[r] + k * V, evict_first, policy)
                                             : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // The first batch of weights is constant data: loaded before waiting for the previous kernel
  // (launch.cuh), so under PDL it streams in while that kernel finishes.
  load_batch(t);
  wait_for_predecessor();
  for (int64_t base = t; base < chunks; base += stride) {
    if (base != t) load_batch(base);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k = base + static_cast<int64_t>(u) * tpg;
      if (k >= chunks) break;
      float wf[R][V];
#pragma unroll
      for (int r = 0; r < R; ++r) unpack16<T>(raw[u][r], wf[r]);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        float xv[V];
        load16(x + n * cols + k * V, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int i = 0; i < V; ++i) acc[r][n] += wf[r][i] * xv[i];
        }
      }
    }
  }

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const float s = warp_sum(acc[r][n]);
      if (lane == 0) partial[warp][r][n] = s;
    }
  }
  __syncthreads();
  // One thread per (group, row, token): groups * R * N <= 8 * 4 * 8 = kThreads; for a paired
  // output the thread of a pair's first slot stores the pair.
  const int o = static_cast<int>(threadIdx.x);
  if (o < groups * R * N) {
    const int g = o / (R * N);
    const int r = (o / N) % R;
    const int n = o % N;
    const auto sum = [&](int rr) {
      float s = 0.0f;
      for (int j = 0; j < warps_per_row; ++j) s += partial[g * warps_per_row + j][rr][n];
      return s;
    };
    const int64_t first = (static_cast<int64_t>(blockIdx.x) * groups + g) * R;
    if constexpr (Out::kPaired) {
      if (r % 2 == 0 && out.valid(first, r)) out.store(first, r, n, sum(r), sum(r + 1));
    } else {
      if (out.valid(first, r)) out.store(first, r, n, sum(r), 0.0f);
    }
  }
}

// Calls f(std::integral_constant<int, N>) for n_tokens = N in 1..8.
template <class F>
void dispatch_tokens(int64_t n_tokens, F&& f) {
  switch (n_tokens) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

template <class T, int N, int R, class Out>
void launch_split(const GemvConfig& c, const void* w, int64_t rows, int64_t cols, const void* x, const Out& out,
                  cudaStream_t stream) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarpsPerBlock / c.warps_per_row) * R;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  launch_kernel(gemv_split_kernel<T, N, R, Out>, blocks, kThreads, 0, stream, static_cast<const T*>(w), cols,
                static_cast<const T*>(x), out, c.warps_per_row, weights_evict_first());
}

// make_out(T{}) gives the kernel's Out for element type T.
template <class MakeOut>
void run_split(const GemvConfig& c, DType type, const void* w, int64_t rows, int64_t cols, const void* x,
               int64_t n_tokens, MakeOut&& make_out, cudaStream_t stream) {
  if (rows <= 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    const auto out = make_out(d);
    using Out = std::remove_cv_t<decltype(out)>;
    dispatch_tokens(n_tokens, [&](auto nc) {
      constexpr int N = decltype(nc)::value;
      if constexpr (Out::kPaired) {  // rows_per_group 2 or 4 (paired_config)
        if (c.rows_per_group == 2) {
          launch_split<T, N, 2>(c, w, rows, cols, x, out, stream);
        } else {
          launch_split<T, N, 4>(c, w, rows, cols, x, out, stream);
        }
      } else {
        switch (c.rows_per_group) {
          case 1: launch_split<T, N, 1>(c, w, rows, cols, x, out, stream); break;
          case 2: launch_split<T, N, 2>(c, w, rows, cols, x, out, stream); break;
          default: launch_split<T, N, 4>(c, w, rows, cols, x, out, stream); break;
        }
      }
    });
  });
}

// A paired output needs whole pairs per group: at least 2 rows per group.
GemvConfig paired_config(GemvConfig c) {
  c.rows_per_group = std::max(c.rows_per_group, 2);
  return c;
}

bool config_valid(const GemvConfig& c) {
  const bool w_ok = c.warps_per_row == 1 || c.warps_per_row == 2 || c.warps_per_row == 4 || c.warps_per_row == 8;
  const bool r_ok = c.rows_per_group == 1 || c.rows_per_group == 2 || c.rows_per_group == 4;
  return w_ok && r_ok;
}

}  // namespace

GemvConfig gemv_config(DType type, int64_t rows, int64_t cols) {
  const int64_t chunks = cols / (16 / static_cast<int64_t>(dtype_size(type)));
  GemvConfig c;
  // As many warps per row as keep every thread at one chunk or more.
  c.warps_per_row = 1;
  while (c.warps_per_row < kWarpsPerBlock && int64_t{64} * c.warps_per_row <= chunks) c.warps_per_row *= 2;
  // Enough rows per group that a thread has ~8 loads in flight (cpt chunks per row each) ...
  const int64_t cpt = (chunks + 32 * c.warps_per_row - 1) / (32 * c.warps_per_row);
  c.rows_per_group = cpt <= 2 ? 4 : cpt <= 4 ? 2 : 1;
  // ... but not so many that the grid stops filling the GPU.
  const int64_t groups = kWarpsPerBlock / c.warps_per_row;
  while (c.rows_per_group > 1 && (rows + groups * c.rows_per_group - 1) / (groups * c.rows_per_group) < kMinBlocks) {
    c.rows_per_group /= 2;
  }
  return c;
}

void gemv(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens, float* y,
          cudaStream_t stream) {
  run_split(gemv_config(type, rows, cols), type, w, rows, cols, x, n_tokens, [&](auto) { return PlainOut{y, rows}; },
            stream);
}

void gemv_swiglu(DType type, const void* w, int64_t inter, int64_t cols, const void* x, int64_t n_tokens, void* act,
                 cudaStream_t stream) {
  run_split(paired_config(gemv_config(type, 2 * inter, cols)), type, w, 2 * inter, cols, x, n_tokens,
            [&](auto t) { return SwigluOut<decltype(t)>{static_cast<decltype(t)*>(act), inter}; }, stream);
}

Status gemv_with_config(const GemvConfig& config, DType type, const void* w, int64_t rows, int64_t cols,
                        const void* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  if (!config_valid(config)) {
    return error(ErrorCode::invalid_argument,
                 "gemv layout: expected warps_per_row in {1, 2, 4, 8} and rows_per_group in {1, 2, 4}, found " +
                     std::to_string(config.warps_per_row) + " and " + std::to_string(config.rows_per_group));
  }
  if (!gemv_supported(type, cols, n_tokens) || rows < 0) {
    return error(ErrorCode::invalid_argument,
                 "gemv shape: expected rows >= 0, cols a multiple of 8 and 1..8 tokens, found rows " +
                     std::to_string(rows) + ", cols " + std::to_string(cols) + ", tokens " + std::to_string(n_tokens));
  }
  run_split(config, type, w, rows, cols, x, n_tokens, [&](auto) { return PlainOut{y, rows}; }, stream);
  return Status::ok_status();
}

void gemv_warp_per_row(DType type, const void* w, int64_t rows, int64_t cols, const void* x, int64_t n_tokens,
                       float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  dispatch_dtype(type, [&](auto d) {
    using T = decltype(d);
    dispatch_tokens(n_tokens, [&](auto nc) {
      constexpr int N = decltype(nc)::value;
      const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      gemv_warp_kernel<T, N><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(w), rows, cols,
                                                             static_cast<const T*>(x), y);
    });
  });
}

}  // namespace kernelllm::cuda
