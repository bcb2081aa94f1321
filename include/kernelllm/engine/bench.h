// Speed measurement of the engine (`kernelllm bench`): prefill time of one prompt, then the
// prompt forked n times and decoded together, for each n in a list; achieved memory
// bandwidth against a device copy measured in the same run; optionally an HF transformers
// peer on the same shape and prompt. Results are JSON (bench/README.md explains each field).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/random_weights.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm {

struct BenchOptions {
  std::string model;           // a model directory or HF id (real weights); empty → random weights
  std::string config;          // with random weights: a named shape (named_config_names) or a config.json path
  uint64_t seed = 0;           // random weights and the random prompt ids
  std::string device = "cpu";  // "cpu" or "cuda:N"
  DType dtype = DType::bf16;   // bf16 or f16 (weights; KV too on cuda)
  int64_t prompt_tokens = 1500;
  int64_t new_tokens = 512;     // decode steps per n; eos does not stop them
  std::vector<int64_t> n = {1, 10, 20};
  int64_t warmup = 1;           // untimed rounds (prefill + a few decode steps) per n first
  // How each step's tokens are drawn: temperature 0 is greedy; above 0 every fork samples with
  // top_p / top_k as generation does (sample index = fork, seed = `seed`).
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  int threads = 0;              // cpu: 0 → hardware concurrency
  bool cuda_graphs = true;
  std::string cuda_plan;        // cuda: a kernel plan text (CudaBackendOptions::plan); "" → auto
  uint64_t memory_cap_bytes = 0;  // cuda: > 0 runs as on a card of this much memory (cap_device_memory)
  std::string peer;             // "" or "hf"
  std::string python = "python3";
  std::filesystem::path peer_script;  // bench/peer_hf.py; empty → found next to the source tree
  std::string command_line;     // recorded as is
};

// Runs the benchmark; `log` receives progress lines. The JSON holds "command", "machine",
// "model", "options", "memory", "copy_bandwidth", "prefill", "decode" (one entry per n) and,
// with a peer, "peer".
Result<Json> run_bench(const BenchOptions& options, const std::function<void(std::string_view)>& log = {});

// A readable table of run_bench's JSON.
std::string format_bench_table(const Json& result);

// Bytes the decode step reads per sequence-independent part: every weight except the
// embedding table (a gather), with lm_head counted once when tied.
uint64_t decode_weight_bytes(const ModelConfig& config, size_t dtype_bytes);
uint64_t parameter_count(const ModelConfig& config);
// KV bytes per token per sequence: layers × 2 × kv_heads × head_dim × element size.
uint64_t kv_bytes_per_token(const ModelConfig& config, size_t element_bytes);

struct GpuFacts {
  std::string name;
  int driver_cuda_version = 0;  // cuDriverGetVersion: 12080 → CUDA 12.8
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  int major = 0, minor = 0;  // compute capability
  int sm_count = 0;
  int smem_per_block = 0;    // the most shared memory a block may opt into, bytes
};
// Through the CUDA driver library (libcuda.so.1, loaded at run time so that every build can
// measure): unavailable → ErrorCode::unsupported.
Result<GpuFacts> query_gpu(int device);
// Device-to-device cudaMemcpy-style copy loop (cuMemcpyDtoD of 1 GiB, median of 20 after
// warmup); counts read + write bytes, as copy benchmarks usually do.
Result<double> measure_copy_bandwidth_gbps(int device);
// Sets aside all of `device`'s memory but cap_bytes (of its total) until the handle is dropped:
// the process then runs as on a card of cap_bytes (e.g. 24 GB). No-op where the total is smaller.
Result<std::shared_ptr<void>> cap_device_memory(int device, uint64_t cap_bytes);

}  // namespace kernelllm
