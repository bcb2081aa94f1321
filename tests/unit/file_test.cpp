// Whole-file reads: regular files, pseudo-files that report size 0, size limits, and read
// failures that must come back as error values (never as exceptions or short strings); and the
// host facts read through them.
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"
#include "kernelllm/base/system.h"

namespace kernelllm {
namespace {

std::filesystem::path temp_file(const std::string& name, const std::string& text) {
  auto p = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

TEST(ReadTextFile, ReadsARegularFileWhole) {
  std::string text(200000, 'x');
  text += "end\n";
  auto r = read_text_file(temp_file("file_test_whole.txt", text));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, text);
}

TEST(ReadTextFile, MissingFileIsNotFound) {
  auto r = read_text_file(std::filesystem::path(::testing::TempDir()) / "file_test_no_such_file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
}

TEST(ReadTextFile, DirectoryIsAnError) {
  auto r = read_text_file(::testing::TempDir());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::io_error);
}

TEST(ReadTextFile, LimitHoldsForRegularAndPseudoFiles) {
  auto r = read_text_file(temp_file("file_test_big.txt", std::string(100, 'y')), 99);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::out_of_range);
  EXPECT_NE(r.status().message().find("found 100"), std::string::npos) << r.status().message();
  // /proc/self/maps reports size 0 but holds far more than 16 bytes.
  auto maps = read_text_file("/proc/self/maps", 16);
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), ErrorCode::out_of_range);
}

TEST(ReadTextFile, PseudoFilesOfSizeZeroAreReadToTheirEnd) {
  auto r = read_text_file("/proc/self/cmdline");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->find("file_test"), std::string::npos);
  auto stat = read_text_file("/proc/self/stat");
  ASSERT_TRUE(stat.ok()) << stat.status().message();
  EXPECT_EQ(stat->rfind(std::to_string(::getpid()) + " (", 0), 0u) << *stat;
}

TEST(ReadTextFile, ReadFailureIsAnErrorValue) {
  // Reading /proc/self/mem at offset 0 (an unmapped address) fails with EIO after a good open:
  // the same path as /proc/<pid>/stat of a process reaped between open and read (ESRCH).
  std::string text;
  EXPECT_NO_THROW({
    auto r = read_text_file("/proc/self/mem");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::io_error);
    text = r.status().message();
  });
  EXPECT_NE(text.find("read failed"), std::string::npos) << text;
}

TEST(HostFacts, MemAvailableIsReadAndBelowTheTotal) {
  auto meminfo = read_text_file("/proc/meminfo");
  ASSERT_TRUE(meminfo.ok()) << meminfo.status().message();
  const size_t at = meminfo->find("MemTotal:");
  ASSERT_NE(at, std::string::npos);
  const uint64_t total = std::stoull(meminfo->substr(at + 9)) * 1024;
  const uint64_t available = mem_available_bytes();
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, total);
}

}  // namespace
}  // namespace kernelllm
