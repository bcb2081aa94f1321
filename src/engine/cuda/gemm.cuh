// Projections through cuBLASLt: Y[n, rows] (fp32) = X[n, cols] . W[rows, cols]^T with W and X
// in the backend dtype (fp32 accumulation; no TF32 for f32). Plans (layouts, heuristic
// algorithm, or a measured preference among its candidates) are cached per shape, so replays
// under CUDA graphs reuse them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "engine/cuda/common.cuh"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // tuned: prefer the candidates of kTuned (gemm.cu) where they apply (measured on the H100; the
  // backend passes the kernel plan's lt_tuned: compute capability 9.x).
  Status init(DType type, bool tuned = false);
  // y [n, rows] = x [n, cols] . W^T, y in fp32.
  Status run(const void* w, int64_t rows, int64_t cols, const void* x, int64_t n, float* y, cudaStream_t stream);
  // The same with y in `y_type`: f32 or the weights' dtype; with `accumulate`, y += x . W^T.
  Status run(const void* w, int64_t rows, int64_t cols, const void* x, int64_t n, void* y, DType y_type,
             cudaStream_t stream, bool accumulate = false);

 private:
  struct Plan;
  Result<Plan*> plan(int64_t rows, int64_t cols, int64_t n, DType y_type);

  DType type_ = DType::bf16;
  bool tuned_ = false;
  void* handle_ = nullptr;  // cublasLtHandle_t
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t, DType>, std::unique_ptr<Plan>> plans_;
};

}  // namespace kernelllm::cuda
