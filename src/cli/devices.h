// --device and --verify-device, read the same way by every command: --device is where the model
// generates, --verify-device where candidates are verified. Both default to cuda when a GPU is
// visible, else cpu, and the generation choice is said on stderr.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernelllm/base/status.h"

namespace kernelllm::cli {

// Adds --device (alias --gen-device) and, when `verify` is given, --verify-device to `cmd`.
void add_device_options(CLI::App* cmd, std::string& device, std::string* verify);

// The generation device: `given` when set (cuda refused when no GPU is visible), else cuda when
// a GPU is visible and this build has the CUDA backend, else cpu. Prints the choice to stderr
// as "<command>: generating on <device> (<why>)".
Result<std::string> resolve_gen_device(const std::string& given, const std::string& command);

// The verifier devices: `given` (cpu, cuda, cuda:N or a comma list) when set, else cuda when a
// GPU is visible, else cpu. A cuda device without a visible GPU is an error.
Result<std::vector<std::string>> resolve_verify_devices(const std::string& given);

}  // namespace kernelllm::cli
