// Embedding lookup: rows of the [vocab, hidden] table (the weight dtype) into the fp32
// residual stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernelllm/engine/safetensors.h"

namespace kernelllm::cuda {

// out[t, :] = float(table[ids[t], :]) for t < n_tokens.
void embedding(DType type, const void* table, const int32_t* ids, int64_t n_tokens, int64_t hidden, float* out,
               cudaStream_t stream);

// What a chained decode step (CudaBackend's decode chain) needs before its pass, done by one
// small kernel instead of copies on the stream: its metadata from pinned host memory (read by
// the kernel through its mapped address) into the device's, its tokens from the step before's
// draws, its page-table entries, and the step before's drawn ids into pinned host memory (at
// most 512 patches and ids: one per thread).
struct ChainPrep {
  const int32_t* host_meta = nullptr;  // pinned: fields of `pitch` ints, n used in each
  int32_t* meta = nullptr;             // the device's, same layout
  int64_t pitch = 0, fields = 0, n = 0;
  const int32_t* drawn = nullptr;  // the step before's ids on the device; null: field 0 as given
  int64_t from_field = 0;          // with drawn: ids[t] = drawn[host_meta[from_field][t]]
  const int32_t* patches = nullptr;  // pinned: n_patches pairs (block-table index, page)
  int64_t n_patches = 0;
  int32_t* table = nullptr;
  const int32_t* publish_from = nullptr;  // ids on the device: [0, n_publish) of them go to
  int32_t* publish = nullptr;             // pinned memory here (null: nothing)
  int64_t n_publish = 0;
};
void chain_prep(const ChainPrep& p, cudaStream_t stream);

}  // namespace kernelllm::cuda
