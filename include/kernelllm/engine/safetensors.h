// safetensors reading: header parsing with strict validation (the file is untrusted input),
// read-only mmap of single files and of sharded checkpoints (model.safetensors.index.json).
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype","shape","data_offsets":[begin,end]}, "__metadata__": {str: str}},
// then the data area; offsets are relative to the data area and need not be aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/file.h"
#include "kernelllm/base/status.h"

namespace kernelllm {

enum class DType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, f8_e4m3, f8_e5m2 };

std::string_view dtype_name(DType dtype);  // the safetensors spelling: "F32", "BF16", ...
size_t dtype_size(DType dtype);            // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the data area; end - begin == numel * dtype_size
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;            // in data order (by begin offset)
  std::map<std::string, std::string> metadata;  // __metadata__
  uint64_t data_offset = 0;                   // 8 + header length
};

// Validates: header length fits the file and a sane cap (100 MB); JSON is an object of
// objects; dtype known; shape non-negative ints, product without overflow; offsets ordered,
// inside the data area, size == numel * dtype_size, tensors do not overlap.
// `file` is the whole file (the header and the data area).
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file);

// A view of one tensor's bytes in a mapped file. Valid while its WeightStore lives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::f32;
  std::span<const int64_t> shape;
  std::span<const std::byte> data;
  int64_t numel() const;
};

// model.safetensors.index.json → {tensor name: shard file name}; shard names are plain file
// names (next to the index), anything else is a parse_error.
Result<std::map<std::string, std::string>> read_safetensors_index(const std::filesystem::path& path);

// All tensors of a checkpoint directory (or of one .safetensors file), mmapped.
class WeightStore {
 public:
  // `path` is a directory holding model.safetensors.index.json (sharded) or
  // model.safetensors, or a path to a single .safetensors file.
  static Result<WeightStore> open(const std::filesystem::path& path);

  bool contains(std::string_view name) const;
  Result<TensorView> get(std::string_view name) const;
  // Like get() but also checks the shape and that the dtype is f32, f16 or bf16;
  // errors read "model.norm.weight: expected shape [64], found [32]".
  Result<TensorView> get_float(std::string_view name, std::span<const int64_t> expected_shape) const;
  std::vector<std::string> names() const;  // sorted
  uint64_t total_bytes() const;            // sum of tensor sizes

 private:
  struct Entry {
    TensorInfo info;
    size_t file_index;
  };
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<SafetensorsHeader> headers_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace kernelllm
