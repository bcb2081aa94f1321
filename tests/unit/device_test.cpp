// The one device-string parser (cpu, cuda, cuda:N) and the GPU-visibility test every command
// uses for its --device / --verify-device defaults.
#include <cstdlib>

#include <gtest/gtest.h>

#include "kernelllm/base/device.h"

namespace kernelllm {
namespace {

TEST(ParseDevice, ReadsCpuCudaAndCudaN) {
  auto cpu = parse_device("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->name(), "cpu");
  auto cuda = parse_device("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_TRUE(cuda->cuda);
  EXPECT_EQ(cuda->index, -1);
  EXPECT_EQ(cuda->index_or_0(), 0);
  EXPECT_EQ(cuda->name(), "cuda");
  auto three = parse_device("cuda:3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->index, 3);
  EXPECT_EQ(three->name(), "cuda:3");
}

TEST(ParseDevice, RefusesOtherSpellingsNamingTheOption) {
  for (const char* bad : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:123456", "CUDA", "cuda:0,cuda:1"}) {
    auto d = parse_device(bad, "--device");
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--device: expected cpu, cuda or cuda:N, found \"" + std::string(bad) + "\""),
              std::string::npos)
        << d.status().message();
  }
}

TEST(GpuVisible, CudaVisibleDevicesEmptyOrMinusOneHidesEveryGpu) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_FALSE(gpu_visible());
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  EXPECT_FALSE(gpu_visible());
  if (old) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else ::unsetenv("CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace kernelllm
