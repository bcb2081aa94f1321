// Device strings (cpu, cuda, cuda:N): the one parser every part uses (engine, verifier, bench,
// CLI), and the one test of whether this process can see an NVIDIA GPU.
#pragma once

#include <string>
#include <string_view>

#include "kernelllm/base/status.h"

namespace kernelllm {

struct DeviceSpec {
  bool cuda = false;
  int index = -1;  // cuda:N's N; -1 for plain "cuda" (the first visible GPU, or all of them for the verifier)
  int index_or_0() const { return index < 0 ? 0 : index; }
  std::string name() const;  // "cpu", "cuda" or "cuda:N", as parsed
};

// Parses one device. `what` names the option in the message ("--device").
Result<DeviceSpec> parse_device(std::string_view text, std::string_view what = "device");

// True when an NVIDIA GPU is visible: the driver's device nodes exist and CUDA_VISIBLE_DEVICES
// does not hide every GPU (set to "" or a list starting with -1).
bool gpu_visible();

}  // namespace kernelllm
