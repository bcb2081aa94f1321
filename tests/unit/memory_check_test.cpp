// The verifier's pre-flight memory check: a problem whose output files (and, on the CPU, input
// sets and kept references) cannot fit this host is refused with the numbers; a small one passes,
// and on a GPU a problem as large as KernelBench's enlarged level 1 needs only its outputs.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/verifier.h"

namespace kernelllm::harness {
namespace {

MemoryNeed need_of(uint64_t in, uint64_t out, uint64_t jobs, bool cpu) {
  return MemoryNeed{std::filesystem::temp_directory_path(), in, out, jobs, cpu, 2};
}

TEST(MemoryCheck, SmallProblemPasses) {
  EXPECT_TRUE(check_problem_memory(need_of(1 << 20, 1 << 20, 2, true)).ok());
  EXPECT_TRUE(check_problem_memory(need_of(1 << 20, 1 << 20, 2, false)).ok());
}

TEST(MemoryCheck, HugeOutputsAreRefusedWithTheNumbers) {
  // 10^5 workers at once, each passing a 6.4 GB output through /dev/shm, cannot fit.
  Status s = check_problem_memory(need_of(6'400'000'000ULL, 6'400'000'000ULL, 100'000, false));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::resource_exhausted);
  EXPECT_NE(s.message().find("GB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--jobs"), std::string::npos) << s.message();
}

TEST(MemoryCheck, InputsCountOnlyOnTheCpu) {
  // Inputs of a petabyte with tiny outputs: on a GPU they are made on the device, never held on
  // the host; on the CPU they are host memory and cannot fit.
  EXPECT_TRUE(check_problem_memory(need_of(uint64_t{1} << 50, 1024, 1, false)).ok());
  Status s = check_problem_memory(need_of(uint64_t{1} << 50, 1024, 1, true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("host memory"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kernelllm::harness
