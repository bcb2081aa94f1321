// Files: a read-only memory map (RAII) and whole-file reads, with errors as values.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kernelllm/base/status.h"

namespace kernelllm {

// A fresh directory under the system temp dir (prefix-XXXXXX), removed with everything in it.
class TempDir {
 public:
  static Result<std::unique_ptr<TempDir>> create(std::string_view prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit TempDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

// A read-only, private mapping of a whole file. Empty files map to an empty span.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::filesystem::path& path);

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void reset();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

// Reads a whole (text) file; pseudo-files that report size 0 (/proc, /sys) are read to their end.
// Every failure (missing, unreadable, a read error midway) is an error value, never an exception.
// `max_bytes` guards against pointing us at a huge file by mistake.
Result<std::string> read_text_file(const std::filesystem::path& path, size_t max_bytes = size_t{1} << 30);

}  // namespace kernelllm
