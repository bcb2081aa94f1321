// A model on disk: locating it (a directory, or an HF id in the local HF cache; downloads are
// the callers' part) and loading its config, generation config, weights and tokenizer.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/config.h"
#include "kernelllm/engine/safetensors.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {

// `name_or_path` is an existing directory, or an HF id "org/name" looked up as
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
// models--org--name/snapshots/<commit>/, the commit being `revision` when that is a commit hash,
// else the content of refs/<revision> (revision empty: refs/main, and when refs/main names no
// snapshot and refs/ names no other revision, the newest complete one). A snapshot is only used when complete
// (missing_model_files); an incomplete one (a download cut off) is a not_found error that
// names what it lacks. Not found → an error that lists where it looked and how to get the
// files (`hf download`, or a local path). Never downloads: the CLI and the Python API do that
// (python/kernelllm/hub.py) when this says not_found.
Result<std::filesystem::path> resolve_model_path(std::string_view name_or_path, std::string_view revision = {});

// What a checkpoint directory lacks for the engine, one entry per missing file: config.json,
// tokenizer.json, and the weights (every shard model.safetensors.index.json names, else
// model.safetensors). Empty: complete. Dangling links (a cache blob not there) count as missing.
std::vector<std::string> missing_model_files(const std::filesystem::path& dir);

// "org/name" (two parts of letters, digits, '.', '_', '-', neither starting with '.' or '-'):
// the ids the CLI and the Python API download when not cached.
bool is_hub_repo_id(std::string_view id);

struct LoadedModel {
  std::filesystem::path dir;
  ModelConfig config;
  GenerationConfig generation;
  Tokenizer tokenizer;
  std::unique_ptr<WeightStore> weights;  // mmapped; backends read from it
};

Result<LoadedModel> load_model(std::string_view name_or_path);

}  // namespace kernelllm
