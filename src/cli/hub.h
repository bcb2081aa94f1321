// --model for the engine commands: a local directory, or an HF id taken from the HF cache and,
// when it is not there (or only part of it is), downloaded first with huggingface_hub through
// the package's kernelllm/hub.py, unless offline.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "kernelllm/base/status.h"

namespace kernelllm::cli {

struct HubOptions {
  std::string revision;  // branch, tag or commit of an HF id; empty: main
  bool offline = false;  // never download (HF_HUB_OFFLINE=1 says the same)
};

// --revision and --offline, beside --model.
void add_hub_options(CLI::App* cmd, HubOptions& hub);

// --offline or HF_HUB_OFFLINE set to a true value (1, ON, YES, TRUE, as huggingface_hub reads it).
bool hub_offline(const HubOptions& hub);

// The model directory for `model`: resolve_model_path's answer when it has one; else, for an
// HF id org/name when not offline, the snapshot that `python kernelllm/hub.py download`
// fetched (its progress bar on our stderr). The Python is $KERNELLLM_HUB_PYTHON (the console
// script sets it to its own interpreter), else $KERNELLLM_PYTHON, else python3.
Result<std::filesystem::path> find_or_download_model(const std::string& model, const HubOptions& hub);

}  // namespace kernelllm::cli
