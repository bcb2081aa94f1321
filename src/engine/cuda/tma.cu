// Tensor maps for the TMA; see tma.cuh.
#include <cudaTypedefs.h>

#include <atomic>

#include "engine/cuda/tma.cuh"

namespace kernelllm::cuda {
namespace {

// cuTensorMapEncodeTiled from the driver (through the runtime: no libcuda link), found once.
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

std::atomic<bool> g_weights_evict_first{false};

}  // namespace

void set_weights_evict_first(bool on) { g_weights_evict_first.store(on, std::memory_order_relaxed); }
bool weights_evict_first() { return g_weights_evict_first.load(std::memory_order_relaxed); }

bool tma_map_2d(CUtensorMap& map, DType type, const void* base, int64_t rows, int64_t cols, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kTmaBoxCols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t estrides[2] = {1, 1};
  const auto element = type == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(&map, element, 2, const_cast<void*>(base), dims, strides, box, estrides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

}  // namespace kernelllm::cuda
