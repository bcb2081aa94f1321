// The "run" block of the optimize, verify and eval reports: what a reader needs to repeat or
// weigh a measurement (kernelllm version, command line, UTC date, host, NVIDIA driver, and the
// Python/torch/Triton versions and devices the verifier reported). Run-specific by design.
#pragma once

#include <string>

#include "kernelllm/base/json.h"

namespace kernelllm {

// {"kernelllm_version", "argv" (this process's, from /proc/self/cmdline), "date_utc"
// (ISO 8601), "host", "nvidia_driver" (null without /proc/driver/nvidia/version), and from
// `verifier_environment` (VerifyReport::environment; null when none ran): "python_version",
// "torch", "triton", "devices" [{"name", "hardware"}]}.
Json run_facts(const Json& verifier_environment = nullptr);

// The driver version in the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64
// Kernel Module  550.54.15 ..." or "... Open Kernel Module for x86_64  580.159.04 ..."); "" if none.
std::string nvidia_driver_version(const std::string& proc_text);

// The time now in UTC, "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();

}  // namespace kernelllm
