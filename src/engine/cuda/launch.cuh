// Kernel launches with programmatic dependent launch (PDL, compute capability 9.0+; nvcc only).
// With PDL a kernel may be started while the one before it in the stream is still running: the
// launch happens once every block of the one before has started and let it (or exited), and
// griddepcontrol.wait returns once the one before has completed and its writes are visible.
// Every kernel started through launch_kernel calls wait_for_predecessor() before it reads or
// writes anything an earlier kernel touches (only data no kernel of the pass writes may be read
// before it: weights, and the pass's metadata and page tables, which host copies upload before
// the pass, or the decode chain's chain_prep writes, which therefore never lets the next kernel
// launch before it ends; an L2 prefetch of anything is safe). That call first lets the next kernel launch,
// then waits: so several kernels may be resident ahead of the one computing, each issuing its
// constant loads (the GEMVs' first weights) into the gaps, and each still starts its real work
// only after its predecessor completed, which completed only after its own wait returned, so
// after every earlier kernel. A kernel is launched only once all blocks of the one before are
// resident, so waiting blocks never hold back blocks of an earlier kernel. (Waiting first, the
// earlier order, let at most one kernel run ahead: batch-1 decode 5.62-5.65 against 5.52-5.54
// ms per step on the H100.)
// Without PDL (older devices, or switched off) both steps are no-ops and launches are plain.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kernelllm::cuda {

// Process-wide switch, off by default: the CUDA backend turns it on for devices of compute
// capability 9.0 and above (the kernel plan's pdl). Safe to flip between launches.
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

// Where a kernel starts depending on its predecessor: lets the next kernel launch, then waits
// for the predecessor (see the top of this file).
__device__ __forceinline__ void wait_for_predecessor() {
  allow_dependent_launch();
  grid_dependency_wait();
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

// Kernels that give each row of a batch one cluster of blocks (the greedy argmax, the device
// draws; common.cuh's cluster_blocks_per_row sizes them): calls launch(std::integral_constant<int,
// B>) for blocks_per_row = B in {1, 2, 4, 8, 16} (any other value: 1).
template <class F>
void dispatch_row_cluster(int blocks_per_row, F&& launch) {
  switch (blocks_per_row) {
    case 16: launch(std::integral_constant<int, 16>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
}

// Kernel over `rows` rows, a cluster of `cluster` blocks of `threads` each per row, `smem` bytes
// of dynamic shared memory a block; clusters past 8 blocks (the portable size) are opted into
// once per kernel.
template <auto Kernel, class... Args>
void launch_row_clusters(int64_t rows, int cluster, int threads, cudaStream_t stream, size_t smem, Args&&... args) {
  if (cluster > 8) {
    static const bool allowed =
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    (void)allowed;
  }
  launch_cluster_kernel(Kernel, dim3(static_cast<unsigned>(rows * cluster)), dim3(static_cast<unsigned>(threads)), smem,
                        static_cast<unsigned>(cluster), stream, std::forward<Args>(args)...);
}

// Lets Kernel take `bytes` of dynamic shared memory (past the default 48 KB), once per kernel
// instance: a later call with other bytes changes nothing. A failure shows as the launch error the
// caller checks.
template <auto Kernel>
void allow_dynamic_smem(size_t bytes) {
  static const cudaError_t set =
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  (void)set;
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, smem, 1, stream, std::forward<Args>(args)...);
}

}  // namespace kernelllm::cuda
