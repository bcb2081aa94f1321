// The verifier's pre-flight memory check: a problem whose input sets, candidate outputs and
// judge references cannot fit this host is refused with the numbers; a small one passes.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/verifier.h"

namespace kernelllm::harness {
namespace {

TEST(MemoryCheck, SmallProblemPasses) {
  MemoryNeed need{std::filesystem::temp_directory_path(), 1 << 20, 1 << 20, 9, 5, 2};
  EXPECT_TRUE(check_problem_memory(need).ok());
}

TEST(MemoryCheck, HugeProblemIsRefusedWithTheNumbers) {
  // 6.4 GB per input set, as KernelBench's enlarged level-1 problems have; 10^5 sets cannot fit.
  MemoryNeed need{std::filesystem::temp_directory_path(), 6'400'000'000ULL, 6'400'000'000ULL, 100'000, 5, 4};
  Status s = check_problem_memory(need);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::resource_exhausted);
  EXPECT_NE(s.message().find("GB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--jobs"), std::string::npos) << s.message();
}

TEST(MemoryCheck, JudgeReferencesCountAgainstHostMemory) {
  // Inputs are tiny, but 10^6 trials of 1 GB references cannot be held by the judge.
  MemoryNeed need{std::filesystem::temp_directory_path(), 1024, 1'000'000'000ULL, 2, 1'000'000, 0};
  Status s = check_problem_memory(need);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("references"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kernelllm::harness
