// A model on disk: locating it (a directory, or an HF id in the local HF cache — never a
// download) and loading its config, generation config, weights and tokenizer.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {

// `name_or_path` is an existing directory, or an HF id "org/name" looked up as
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
// models--org--name/snapshots/<rev>/ where <rev> is refs/main's content when present,
// else the only (or newest) snapshot holding a config.json. Not found → an error that lists
// where it looked and how to get the files (huggingface-cli download / a local path).
Result<std::filesystem::path> resolve_model_path(std::string_view name_or_path);

struct LoadedModel {
  std::filesystem::path dir;
  ModelConfig config;
  GenerationConfig generation;
  Tokenizer tokenizer;
  std::unique_ptr<WeightStore> weights;  // mmapped; backends read from it
};

Result<LoadedModel> load_model(std::string_view name_or_path);

}  // namespace kernelllm
