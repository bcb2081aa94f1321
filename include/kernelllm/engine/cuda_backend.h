// The CUDA backend: the Llama forward of the CPU reference on one NVIDIA GPU, weights in
// bf16, f16 or f32 (f32: a parity path), a paged copy-on-write KV cache on the device,
// cuBLASLt for prefill/batched projections, a custom GEMV for small batches, CUDA graphs for
// decode steps. Built only when a CUDA toolkit with cuBLASLt is found; otherwise every
// function here returns ErrorCode::unsupported.
#pragma once

#include <cstdint>
#include <memory>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm {

bool cuda_backend_built();

struct CudaBackendOptions {
  int device = 0;
  DType dtype = DType::bf16;         // weights, activations fed to matmuls and KV: bf16, f16 or f32
  int64_t max_sequences = 256;
  int64_t kv_capacity_tokens = 0;    // KV pool size in tokens (all sequences); 0 → from memory_fraction
  // With kv_capacity_tokens == 0: > 0 sizes the KV pool so that this backend's device memory
  // (context, weights, workspaces, KV) stays within this fraction of the device's total, leaving
  // the rest to others on the same GPU (e.g. the verifier's processes); 0 → all free memory but
  // 1.5 GiB.
  double memory_fraction = 0.0;
  int64_t kv_page_tokens = 16;       // tokens per KV page; pages are shared between forks
  int64_t max_batch_tokens = 4096;   // tokens per device pass; larger forwards run in chunks
  bool cuda_graphs = true;           // capture single-token (decode) forwards per batch size
  bool custom_gemv = true;           // the custom GEMV for one token (else cuBLASLt)
  // The tensor-core skinny GEMM for 2..16 tokens with f16/bf16 weights (else cuBLASLt); the
  // environment variable KERNELLLM_CUDA_SKINNY=0 turns it off too, and
  // KERNELLLM_CUDA_SKINNY_TOKENS=N (1..32) moves its upper bound (measurements).
  bool skinny_gemm = true;
  // The staged tensor-core GEMM (weights through shared memory by TMA, compute capability 9.0+)
  // for 17..32 tokens with f16/bf16 weights, on the matrices where it beats cuBLASLt (the
  // vocabulary projection); the environment variable KERNELLLM_CUDA_STAGED=0 turns it off too.
  bool staged_gemm = true;
  // The band tensor-core GEMM (each SM streams its own band of weight rows by TMA, compute
  // capability 9.0+) for 17..32 tokens with f16/bf16 weights, on the layer matrices where it
  // beats cuBLASLt (gate_up); the environment variable KERNELLLM_CUDA_BAND=0 turns it off too,
  // =all has it serve every projection the staged GEMM does not (measurements).
  bool band_gemm = true;
  // Sampled draws (temperature > 0) on the device (src/engine/sample_block.h: a cluster of
  // thread blocks per draw, ids copied back) instead of the logits copied to the host for
  // sample_token; the environment variable KERNELLLM_CUDA_DEVICE_SAMPLING=0 turns it off too.
  bool device_sampling = true;
};

// Uploads `weights` (f32/f16/bf16, converted to options.dtype on the device). `weights` may be
// released after the call.
Result<std::unique_ptr<Backend>> make_cuda_backend(const ModelConfig& config, const WeightStore& weights,
                                                    const CudaBackendOptions& options = {});

// Random weights made on the device from `seed` (uniform, std 0.02; norm weights 1): speed runs
// with a real model's shape without reading a checkpoint.
Result<std::unique_ptr<Backend>> make_cuda_backend_random(const ModelConfig& config, uint64_t seed,
                                                           const CudaBackendOptions& options = {});

}  // namespace kernelllm
