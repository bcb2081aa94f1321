// Stand-in for the CUDA backend in builds without a CUDA toolkit (compiled only then): every
// entry point says so.
#include "kernelllm/engine/cuda_backend.h"

namespace kernelllm {
namespace {
Status unavailable() {
  return error(ErrorCode::unsupported,
               "kernelllm was built without the CUDA backend (no CUDA toolkit with cuBLASLt found at build time)");
}
}  // namespace

bool cuda_backend_built() { return false; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const ModelConfig&, const WeightStore&, const CudaBackendOptions&) {
  return unavailable();
}

Result<std::unique_ptr<Backend>> make_cuda_backend_random(const ModelConfig&, uint64_t, const CudaBackendOptions&) {
  return unavailable();
}

}  // namespace kernelllm
