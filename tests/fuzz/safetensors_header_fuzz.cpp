// libFuzzer target for parse_safetensors_header: any byte string must yield ok or an error,
// and an accepted header must describe tensors that lie inside the buffer without overlap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "kernelllm/engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto header = kernelllm::parse_safetensors_header(file);
  if (!header.ok()) return 0;
  if (header->data_offset > size) std::abort();
  const uint64_t data_size = size - header->data_offset;
  uint64_t prev_end = 0;
  for (const kernelllm::TensorInfo& t : header->tensors) {
    if (t.begin > t.end || t.end > data_size) std::abort();
    if (t.end - t.begin != static_cast<uint64_t>(t.numel()) * kernelllm::dtype_size(t.dtype)) std::abort();
    if (t.begin == t.end) continue;
    if (t.begin < prev_end) std::abort();
    prev_end = t.end;
  }
  return 0;
}
