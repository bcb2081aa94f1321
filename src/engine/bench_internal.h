// Pieces of `kernelllm bench` shared by src/engine/bench*.cpp and not part of the public
// header: device parsing, machine facts, the memory check, the
// seeded prompt and the HF peer subprocess.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/bench.h"

namespace kernelllm::bench {

struct Device {
  bool cuda = false;
  int index = 0;
};
// "cpu", "cuda" (= cuda:0) or "cuda:N".
Result<Device> parse_device(std::string_view text);

// Seeded ids in [0, min(vocab, 128000)) (regular tokens only, no special ids).
std::vector<int32_t> random_prompt(int64_t count, int64_t vocab, uint64_t seed);

// The process's KERNELLLM_* environment variables, name to value (machine_facts' "environment").
Json kernelllm_environment();
// CPU model, threads, GPU facts (cuda), kernelllm version, git commit when known, environment.
Json machine_facts(const Device& device);

// The kernel plan the CUDA backend makes on this GPU for `plan_text` ("" → KERNELLLM_CUDA_PLAN):
// its text, the GPU traits it saw, the prefill attention's form and, per n, which kernel serves
// each projection and the attention of a decode step of n forks of one prompt.
Result<Json> describe_cuda_plan(const Device& device, const ModelConfig& config, DType dtype,
                                const std::string& plan_text, const std::vector<int64_t>& n);

// Errors with resource_exhausted when weights + KV + workspace exceed the free device memory
// (cuda) or MemAvailable (cpu); otherwise the figures as JSON.
Result<Json> check_memory(const Device& device, uint64_t weights_bytes, uint64_t kv_bytes, uint64_t workspace_bytes,
                          int64_t max_n, int64_t tokens_per_sequence);

// The repository root (holding bench/peer_hf.py), searched upwards from the executable and
// the working directory; empty when not found.
std::filesystem::path find_source_dir();

// The commit the results come from: `git rev-parse HEAD` in source_dir when it is a checkout;
// else the environment's KERNELLLM_GIT_COMMIT when it holds 7 to 40 hex digits (a build from
// `git archive`, whose commit `git get-tar-commit-id` reads); else empty.
std::string git_commit_of(const std::filesystem::path& source_dir);

// Runs bench/peer_hf.py on the same shape and prompt; its JSON, or {"error": ...}.
Json run_hf_peer(const BenchOptions& options, const std::string& config_json, const std::vector<int32_t>& prompt);

}  // namespace kernelllm::bench
