// The reports' run facts: the NVIDIA driver version read from /proc/driver/nvidia/version.
#include <gtest/gtest.h>

#include "kernelllm/base/run_facts.h"

namespace kernelllm {
namespace {

TEST(RunFacts, DriverVersionOfTheProprietaryModule) {
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC "
                                  "2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "550.54.15");
}

TEST(RunFacts, DriverVersionOfTheOpenModuleSkipsItsWords) {
  // Seen on an H200 host: the version follows "for x86_64", which the first reading took for it.
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                                  "(dvs-builder@U22-I3-AM02-24-3)  Wed Apr  1 2026\nGCC version:  gcc version 12\n"),
            "580.159.04");
}

TEST(RunFacts, NoVersionIsEmpty) {
  EXPECT_EQ(nvidia_driver_version(""), "");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\nGCC version: 12.2.0\n"), "");
  EXPECT_EQ(nvidia_driver_version("something else 1.2.3"), "");
}

}  // namespace
}  // namespace kernelllm
