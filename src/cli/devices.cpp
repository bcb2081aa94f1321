// One resolution of --device / --verify-device for every command (see devices.h).
#include "cli/devices.h"

#include <cstdio>

#include <fmt/format.h>

#include "kernelllm/base/device.h"
#include "kernelllm/engine/cuda_backend.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::cli {

namespace {

Status require_visible_gpu(const std::string& option, const std::string& given) {
  if (gpu_visible()) return {};
  return error(ErrorCode::invalid_argument,
               fmt::format("{} {}: no GPU is visible to this process (no NVIDIA driver device, or CUDA_VISIBLE_DEVICES "
                           "hides them); use {} cpu or leave it out",
                           option, given, option));
}

}  // namespace

void add_device_options(CLI::App* cmd, std::string& device, std::string* verify) {
  cmd->add_option("--device,--gen-device", device,
                  "Where the model generates: cpu, cuda or cuda:N (default: cuda when a GPU is visible, else cpu)");
  if (verify != nullptr) {
    cmd->add_option("--verify-device", *verify,
                    "Where candidates are verified: cpu (Triton interpreter), cuda (all visible GPUs), cuda:N or "
                    "cuda:0,cuda:1 (default: cuda when a GPU is visible, else cpu)");
  }
}

Result<std::string> resolve_gen_device(const std::string& given, const std::string& command) {
  if (!given.empty()) {
    KLLM_ASSIGN_OR_RETURN(DeviceSpec d, parse_device(given, "--device"));
    if (d.cuda) KLLM_RETURN_IF_ERROR(require_visible_gpu("--device", given));
    std::fprintf(stderr, "%s: generating on %s (--device)\n", command.c_str(), d.name().c_str());
    return d.name();
  }
  const bool visible = gpu_visible();
  const bool use_cuda = visible && cuda_backend_built();
  const char* why = use_cuda ? "a GPU is visible"
                    : visible ? "a GPU is visible but this build has no CUDA backend"
                              : "no GPU is visible";
  std::fprintf(stderr, "%s: generating on %s (%s; --device chooses)\n", command.c_str(), use_cuda ? "cuda" : "cpu", why);
  return std::string(use_cuda ? "cuda" : "cpu");
}

Result<std::vector<std::string>> resolve_verify_devices(const std::string& given) {
  if (given.empty()) return std::vector<std::string>{gpu_visible() ? "cuda" : "cpu"};
  auto devices = harness::parse_devices(given);
  if (!devices.ok()) return error(ErrorCode::invalid_argument, "--verify-device: " + devices.status().message());
  if ((*devices)[0] != "cpu") KLLM_RETURN_IF_ERROR(require_visible_gpu("--verify-device", given));
  return devices;
}

}  // namespace kernelllm::cli
