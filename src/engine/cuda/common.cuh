// Shared host-side pieces of the CUDA backend: CUDA errors as Status values and an RAII
// device allocation. Includable from plain C++ (tests), no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// ok for cudaSuccess, else internal (resource_exhausted for out-of-memory) naming `what`.
Status cuda_status(cudaError_t err, const std::string& what);

#define KLLM_CUDA_RETURN(expr, what) KLLM_RETURN_IF_ERROR(::kernelllm::cuda::cuda_status((expr), (what)))

// True for the dtypes the backend computes in (f32, f16, bf16).
bool is_compute_dtype(DType t);

// Split-K parts of one projection's output: band_gemm_parts writes 1..kMaxOutputParts of them,
// add_rmsnorm (delta parts) and rope_write_kv (qkv parts) add them in order.
inline constexpr int kMaxOutputParts = 8;

// The current device's multiprocessor count, asked once per process (0 when it cannot be asked).
int current_sm_count();

// Blocks per row for kernels that give each row of a batch one cluster of blocks (the device
// draws, the greedy argmax): 1 below compute capability 9.0 (no clusters), else the largest of
// 16, 8, 4, 2 that fits every row's blocks at `per_sm` blocks per SM, or 1.
int cluster_blocks_per_row(int compute_major, int sm_count, int64_t rows, int per_sm = 1);
// The greedy argmax's blocks (512 threads, few registers) fit four to an SM.
inline constexpr int kArgmaxBlocksPerSm = 4;

// Process-wide switch, off by default: the CUDA backend sets the kernel plan's
// weights_evict_first (on by default). With it the band and staged GEMMs read their weights
// with an L2 evict-first policy (tma_box_once), the GEMV and the skinny GEMM theirs likewise
// (device_types.cuh's load_stream with a policy): a pass reads each weight once, so its 15 GB
// stream should not push out of L2 what the small kernels read back (activations, partial sums,
// K/V and logits written or prefetched moments before).
void set_weights_evict_first(bool on);
bool weights_evict_first();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();

  Status allocate(size_t bytes, const std::string& what);
  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kernelllm::cuda
