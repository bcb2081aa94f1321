// The CUDA backend: the Llama forward of the CPU reference on one NVIDIA GPU, weights in
// bf16, f16 or f32 (f32: a parity path), a paged copy-on-write KV cache on the device, our own
// kernels or cuBLASLt for each projection as the kernel plan says, CUDA graphs for decode
// steps. Built only when a CUDA toolkit with cuBLASLt is found; otherwise every
// function here returns ErrorCode::unsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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
  // The kernel plan (src/engine/cuda_plan.h: which kernel serves each projection and the
  // attention): "" takes the environment variable KERNELLLM_CUDA_PLAN ("auto" or "portable");
  // bench programs and tests may give a full plan text, e.g. "portable" or "band=off,chain=0".
  std::string plan;
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
