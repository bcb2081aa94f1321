// Shared by the engine parity tests: loads a tiny random Llama-3 checkpoint made by
// tools/make_tiny_llama.py and its HF golden outputs (golden.safetensors, golden.json) from
// $KERNELLLM_TESTDATA/models/<name>. Missing data is a test failure, never a skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernelllm/base/file.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"

namespace kernelllm::testing {

struct TinyLlama {
  std::filesystem::path dir;
  ModelConfig config;
  std::unique_ptr<WeightStore> weights;
  std::unique_ptr<WeightStore> golden;           // prompt{i}_logits, decode{i}_logits (f32)
  std::vector<std::vector<int32_t>> prompts;     // golden.json "prompts"
  std::vector<std::vector<int32_t>> greedy;      // golden.json "greedy": HF greedy ids per prompt
  std::vector<std::vector<int32_t>> greedy_f32ref;  // bf16 models: HF greedy in fp32 on the same weights
  std::string dtype;                             // "float32" / "bfloat16"

  // Rows of a golden f32 matrix, copied (the mapping need not be 4-byte aligned).
  std::vector<float> logits(const std::string& name) const {
    auto t = golden->get(name);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return {};
    std::vector<float> out(static_cast<size_t>(t->numel()));
    std::memcpy(out.data(), t->data.data(), out.size() * sizeof(float));
    return out;
  }
};

inline std::filesystem::path testdata_dir() {
  const char* env = std::getenv("KERNELLLM_TESTDATA");
  if (env == nullptr || *env == '\0') {
    ADD_FAILURE() << "KERNELLLM_TESTDATA is not set (run tools/make_test_data.py --out DIR and point it there)";
    return {};
  }
  return env;
}

// Loads models/<name>; fails the test (returns false) when anything is missing.
inline bool load_tiny_llama(const std::string& name, TinyLlama& out) {
  const auto root = testdata_dir();
  if (root.empty()) return false;
  out.dir = root / "models" / name;
  auto config = ModelConfig::from_file(out.dir / "config.json");
  if (!config.ok()) {
    ADD_FAILURE() << config.status().to_string();
    return false;
  }
  out.config = *config;
  auto weights = WeightStore::open(out.dir);
  auto golden = WeightStore::open(out.dir / "golden.safetensors");
  auto meta_text = read_text_file(out.dir / "golden.json");
  if (!weights.ok() || !golden.ok() || !meta_text.ok()) {
    ADD_FAILURE() << "missing test data in " << out.dir << ": " << weights.status().to_string() << " / "
                  << golden.status().to_string() << " / " << meta_text.status().to_string();
    return false;
  }
  out.weights = std::make_unique<WeightStore>(std::move(weights).value());
  out.golden = std::make_unique<WeightStore>(std::move(golden).value());
  const auto meta = nlohmann::json::parse(*meta_text);
  out.prompts = meta.at("prompts").get<std::vector<std::vector<int32_t>>>();
  out.greedy = meta.at("greedy").get<std::vector<std::vector<int32_t>>>();
  out.dtype = meta.at("dtype").get<std::string>();
  if (meta.contains("greedy_f32ref")) {
    out.greedy_f32ref = meta.at("greedy_f32ref").get<std::vector<std::vector<int32_t>>>();
  }
  return true;
}

}  // namespace kernelllm::testing
