// Kernel launches with programmatic dependent launch (PDL, compute capability 9.0+; nvcc only).
// With PDL a kernel may be started while the one before it in the stream is still finishing:
// its blocks run up to grid_dependency_wait(), which returns once the previous kernel has
// completed and its writes are visible. Every kernel started through launch_kernel therefore
// calls grid_dependency_wait() before it reads or writes anything an earlier kernel touches
// (only data no kernel of the pass writes may be read before it: weights, and the pass's
// metadata and page tables, which host copies upload before the pass; an L2 prefetch of
// anything is safe), then allow_dependent_launch()
// so the next kernel can start in turn: at most one kernel runs ahead of the one computing.
// Without PDL (older devices, or switched off) both calls are no-ops and launches are plain.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace kernelllm::cuda {

// Process-wide switch, off by default: the CUDA backend turns it on for devices of compute
// capability 9.0 and above unless KERNELLLM_CUDA_PDL=0. Safe to flip between launches.
void set_programmatic_launch(bool on);
bool programmatic_launch();

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when programmatic_launch(), and the
// grid's blocks in clusters of `cluster` when it is above 1 (compute capability 9.0+; grid.x a
// multiple of it). Launch errors are reported as for <<<>>>: by the next cudaGetLastError().
template <class... Params, class... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  if (programmatic_launch()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = n;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, smem, 1, stream, std::forward<Args>(args)...);
}

}  // namespace kernelllm::cuda
