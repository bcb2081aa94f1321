// CUDA error mapping and the device allocation wrapper; see common.cuh.
#include "engine/cuda/common.cuh"

#include <atomic>
#include <utility>

#include "engine/cuda/launch.cuh"

namespace kernelllm::cuda {

Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::ok_status();
  const ErrorCode code = err == cudaErrorMemoryAllocation ? ErrorCode::resource_exhausted : ErrorCode::internal;
  return error(code, "cuda: " + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

bool is_compute_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

int current_sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 0;
    }
    return n;
  }();
  return sms;
}

namespace {
std::atomic<bool> g_programmatic_launch{false};
}  // namespace

void set_programmatic_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }

int cluster_blocks_per_row(int compute_major, int sm_count, int64_t rows, int per_sm) {
  if (compute_major < 9) return 1;
  int b = 16;
  while (b > 1 && static_cast<int64_t>(b) * rows > static_cast<int64_t>(sm_count) * per_sm) b /= 2;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

Status DeviceBuffer::allocate(size_t bytes, const std::string& what) {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (bytes == 0) return Status::ok_status();
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    return cuda_status(err, "allocating " + std::to_string(bytes) + " bytes for " + what);
  }
  bytes_ = bytes;
  return Status::ok_status();
}

}  // namespace kernelllm::cuda
