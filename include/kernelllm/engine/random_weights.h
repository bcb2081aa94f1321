// Models with random weights: the built-in shapes (KernelLLM's own, exactly, and tiny CPU-sized
// ones) and a seeded checkpoint of any shape. Used by `kernelllm bench`, `--random-weights` of
// the commands that generate, and the tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm {

// Built-in shapes: "llama-3.1-8b" (exactly KernelLLM's config.json) and tiny CPU-sized ones.
std::vector<std::string> named_config_names();
// The config.json text of a named shape; an unknown name lists the known ones.
Result<std::string> named_config_json(std::string_view name);
// `name_or_path`: a named shape, else a config.json path.
Result<std::string> bench_config_json(std::string_view name_or_path);

// Writes config.json and model.safetensors with seeded random weights (uniform, std 0.02;
// norm weights 1) of `config_json`'s shape into `dir` (created), in `dtype` (f32, f16, bf16).
Status write_random_checkpoint(const std::filesystem::path& dir, std::string_view config_json, DType dtype,
                               uint64_t seed);

}  // namespace kernelllm
