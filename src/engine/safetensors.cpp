// safetensors header validation and the mmapped WeightStore over one file or a sharded
// checkpoint. Every byte of the file is untrusted: each offset and size is checked against
// the buffer before anything points into it, with 64-bit overflow checks on products.
#include "kernelllm/engine/safetensors.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "kernelllm/base/file.h"
#include "kernelllm/base/json.h"

namespace kernelllm {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's cap

struct DTypeName {
  DType dtype;
  std::string_view name;
  size_t bytes;
};
constexpr DTypeName kDTypes[] = {
    {DType::f64, "F64", 8},     {DType::f32, "F32", 4},          {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},   {DType::i64, "I64", 8},          {DType::i32, "I32", 4},
    {DType::i16, "I16", 2},     {DType::i8, "I8", 1},            {DType::u8, "U8", 1},
    {DType::boolean, "BOOL", 1}, {DType::f8_e4m3, "F8_E4M3", 1}, {DType::f8_e5m2, "F8_E5M2", 1},
};

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status tensor_error(ErrorCode code, const std::string& name, const std::string& message) {
  return error(code, "safetensors tensor \"" + name + "\": " + message);
}

// A short description of untrusted JSON for messages. Never recursive: dump() of a deeply
// nested array would overflow the stack, so only flat lists of scalars are printed.
std::string describe(const Json& j) {
  if (j.is_primitive()) {
    std::string s = j.dump();
    return s.size() > 64 ? s.substr(0, 61) + "..." : s;
  }
  if (j.is_array() && j.size() <= 8 &&
      std::all_of(j.begin(), j.end(), [](const Json& e) { return e.is_number() || e.is_boolean() || e.is_null(); })) {
    return j.dump();
  }
  return std::string(json_type_name(j)) + " of " + std::to_string(j.size()) + " items";
}

// A JSON integer that fits uint64 (nlohmann stores non-negative literals as unsigned).
std::optional<uint64_t> as_u64(const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

Result<TensorInfo> parse_entry(const std::string& name, const Json& e, uint64_t data_size) {
  if (!e.is_object()) {
    return tensor_error(ErrorCode::parse_error, name, "expected an object, found " + std::string(json_type_name(e)));
  }
  TensorInfo t;
  t.name = name;
  const std::string what = "safetensors tensor \"" + name + "\"";
  KLLM_ASSIGN_OR_RETURN(std::string dtype, json_string(e, "dtype", what));
  auto d = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const DTypeName& x) { return x.name == dtype; });
  if (d == std::end(kDTypes)) {
    return tensor_error(ErrorCode::unsupported, name,
                        "expected dtype F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3 or F8_E5M2, "
                        "found \"" + dtype + "\"");
  }
  t.dtype = d->dtype;

  auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array()) {
    return tensor_error(ErrorCode::parse_error, name,
                        "expected \"shape\" as a list of non-negative integers, found " +
                            std::string(shape == e.end() ? "nothing" : json_type_name(*shape)));
  }
  uint64_t numel = 1;
  for (const Json& dim : *shape) {
    auto v = as_u64(dim);
    if (!v || *v > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return tensor_error(ErrorCode::parse_error, name,
                          "expected non-negative integer shape entries, found " + describe(dim));
    }
    if (__builtin_mul_overflow(numel, *v, &numel) || numel > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return tensor_error(ErrorCode::out_of_range, name, "element count of shape " + describe(*shape) +
                                                             " overflows 64 bits");
    }
    t.shape.push_back(static_cast<int64_t>(*v));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t{d->bytes}, &nbytes)) {
    return tensor_error(ErrorCode::out_of_range, name, "byte size of shape " + describe(*shape) + " overflows 64 bits");
  }

  auto offsets = e.find("data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets != e.end() && offsets->is_array() && offsets->size() == 2) {
    begin = as_u64((*offsets)[0]);
    end = as_u64((*offsets)[1]);
  }
  if (!begin || !end || *begin > *end) {
    return tensor_error(ErrorCode::parse_error, name,
                        "expected \"data_offsets\" [begin, end] with 0 <= begin <= end, found " +
                            (offsets == e.end() ? std::string("nothing") : describe(*offsets)));
  }
  if (*end > data_size) {
    return tensor_error(ErrorCode::out_of_range, name,
                        "expected data_offsets within the data area of " + std::to_string(data_size) +
                            " bytes, found end " + std::to_string(*end));
  }
  if (*end - *begin != nbytes) {
    return tensor_error(ErrorCode::parse_error, name,
                        "expected " + std::to_string(nbytes) + " bytes (" + std::to_string(numel) + " x " +
                            std::string(d->name) + " for shape " + shape_string(t.shape) + "), found " +
                            std::to_string(*end - *begin) + " in data_offsets");
  }
  t.begin = *begin;
  t.end = *end;
  return t;
}

Result<std::map<std::string, std::string>> parse_metadata(const Json& m) {
  if (!m.is_object()) {
    return error(ErrorCode::parse_error,
                 "safetensors __metadata__: expected an object of strings, found " + std::string(json_type_name(m)));
  }
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->is_string()) {
      return error(ErrorCode::parse_error, "safetensors __metadata__ \"" + it.key() + "\": expected string, found " +
                                               std::string(json_type_name(*it)));
    }
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.bytes;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> file) {
  if (file.size() < 8) {
    return error(ErrorCode::parse_error, "safetensors: expected at least 8 bytes (the header length), found " +
                                             std::to_string(file.size()));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(file[size_t(i)]);
  if (header_len > kMaxHeaderBytes) {
    return error(ErrorCode::out_of_range, "safetensors: expected a header of at most " +
                                              std::to_string(kMaxHeaderBytes) + " bytes, found " +
                                              std::to_string(header_len));
  }
  if (header_len > file.size() - 8) {
    return error(ErrorCode::out_of_range, "safetensors: header length " + std::to_string(header_len) +
                                              " runs past the end of the file (expected at most " +
                                              std::to_string(file.size() - 8) + ")");
  }
  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, header_len);
  KLLM_ASSIGN_OR_RETURN(Json root, parse_json(text, "safetensors header"));
  if (!root.is_object()) {
    return error(ErrorCode::parse_error,
                 "safetensors header: expected a JSON object, found " + std::string(json_type_name(root)));
  }
  SafetensorsHeader h;
  h.data_offset = 8 + header_len;
  const uint64_t data_size = file.size() - h.data_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      KLLM_ASSIGN_OR_RETURN(h.metadata, parse_metadata(*it));
      continue;
    }
    KLLM_ASSIGN_OR_RETURN(TensorInfo t, parse_entry(it.key(), *it, data_size));
    h.tensors.push_back(std::move(t));
  }
  // Data order; then any two neighbours with bytes must not share any.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin == t.end) continue;  // empty tensors occupy no bytes
    if (prev != nullptr && t.begin < prev->end) {
      return tensor_error(ErrorCode::parse_error, t.name,
                          "overlaps \"" + prev->name + "\": expected data to start at or after byte " +
                              std::to_string(prev->end) + ", found " + std::to_string(t.begin));
    }
    prev = &t;
  }
  return h;
}

namespace {

Result<SafetensorsHeader> open_checked(const std::filesystem::path& path, std::unique_ptr<MappedFile>& out) {
  KLLM_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto header = parse_safetensors_header(file.bytes());
  if (!header.ok()) return header.status().with_context(path.string());
  out = std::make_unique<MappedFile>(std::move(file));
  return header;
}

}  // namespace

Result<std::map<std::string, std::string>> read_safetensors_index(const std::filesystem::path& path) {
  const std::string what = path.string();
  KLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, size_t{256} << 20));
  KLLM_ASSIGN_OR_RETURN(Json root, parse_json(text, what));
  if (!root.is_object()) {
    return error(ErrorCode::parse_error, what + ": expected a JSON object, found " + std::string(json_type_name(root)));
  }
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    return error(ErrorCode::parse_error, what + ": expected a \"weight_map\" object, found " +
                                             (map == root.end() ? "nothing" : std::string(json_type_name(*map))));
  }
  std::map<std::string, std::string> out;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it->is_string()) {
      return error(ErrorCode::parse_error, what + ": weight_map[\"" + it.key() + "\"]: expected a shard file name, found " +
                                               std::string(json_type_name(*it)));
    }
    const std::string shard = it->get<std::string>();
    // Shards live next to the index; a name with directories could point anywhere.
    if (shard.empty() || std::filesystem::path(shard).filename() != shard || shard == "." || shard == "..") {
      return error(ErrorCode::parse_error, what + ": weight_map[\"" + it.key() +
                                               "\"]: expected a plain file name, found \"" + shard + "\"");
    }
    out[it.key()] = shard;
  }
  return out;
}

Result<WeightStore> WeightStore::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  WeightStore store;
  auto add_file = [&](const fs::path& file) -> Result<size_t> {
    std::unique_ptr<MappedFile> mapped;
    KLLM_ASSIGN_OR_RETURN(SafetensorsHeader header, open_checked(file, mapped));
    store.files_.push_back(std::move(mapped));
    store.headers_.push_back(std::move(header));
    return store.files_.size() - 1;
  };
  auto add_all = [&](size_t index) -> Status {
    for (const TensorInfo& t : store.headers_[index].tensors) {
      auto [pos, inserted] = store.entries_.try_emplace(t.name, Entry{t, index});
      if (!inserted) {
        return error(ErrorCode::parse_error, "tensor \"" + t.name + "\" appears in both " +
                                                 store.files_[pos->second.file_index]->path().string() + " and " +
                                                 store.files_[index]->path().string());
      }
    }
    return Status::ok_status();
  };

  if (!fs::is_directory(path, ec)) {
    KLLM_ASSIGN_OR_RETURN(size_t index, add_file(path));
    KLLM_RETURN_IF_ERROR(add_all(index));
    return store;
  }
  const fs::path index_path = path / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    KLLM_ASSIGN_OR_RETURN(auto weight_map, read_safetensors_index(index_path));
    std::map<std::string, size_t> shard_index;
    for (const auto& [name, shard] : weight_map) {
      if (shard_index.count(shard)) continue;
      const fs::path shard_path = path / shard;
      if (!fs::exists(shard_path, ec)) {
        return error(ErrorCode::not_found, index_path.string() + ": shard \"" + shard + "\" (holding \"" + name +
                                               "\") not found: expected " + shard_path.string());
      }
      KLLM_ASSIGN_OR_RETURN(size_t index, add_file(shard_path));
      KLLM_RETURN_IF_ERROR(add_all(index));
      shard_index[shard] = index;
    }
    for (const auto& [name, shard] : weight_map) {
      auto it = store.entries_.find(name);
      if (it == store.entries_.end() || it->second.file_index != shard_index[shard]) {
        return error(ErrorCode::not_found, index_path.string() + ": tensor \"" + name + "\" expected in shard " +
                                               shard + ", found " +
                                               (it == store.entries_.end()
                                                    ? std::string("in no shard")
                                                    : "in " + store.files_[it->second.file_index]->path().string()));
      }
    }
    return store;
  }
  const fs::path single = path / "model.safetensors";
  if (fs::exists(single, ec)) {
    KLLM_ASSIGN_OR_RETURN(size_t index, add_file(single));
    KLLM_RETURN_IF_ERROR(add_all(index));
    return store;
  }
  return error(ErrorCode::not_found, path.string() + ": expected model.safetensors.index.json or "
                                                     "model.safetensors in this directory, found neither");
}

bool WeightStore::contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }

Result<TensorView> WeightStore::get(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return error(ErrorCode::not_found, "tensor \"" + std::string(name) + "\" not found in the checkpoint (" +
                                           std::to_string(entries_.size()) + " tensors)");
  }
  const Entry& e = it->second;
  const uint64_t offset = headers_[e.file_index].data_offset + e.info.begin;
  TensorView v;
  v.name = it->first;
  v.dtype = e.info.dtype;
  v.shape = e.info.shape;
  v.data = files_[e.file_index]->bytes().subspan(offset, e.info.end - e.info.begin);
  return v;
}

Result<TensorView> WeightStore::get_float(std::string_view name, std::span<const int64_t> expected_shape) const {
  KLLM_ASSIGN_OR_RETURN(TensorView v, get(name));
  if (v.dtype != DType::f32 && v.dtype != DType::f16 && v.dtype != DType::bf16) {
    return error(ErrorCode::unsupported, std::string(name) + ": expected dtype F32, F16 or BF16, found " +
                                             std::string(dtype_name(v.dtype)));
  }
  if (!std::equal(v.shape.begin(), v.shape.end(), expected_shape.begin(), expected_shape.end())) {
    return error(ErrorCode::invalid_argument, std::string(name) + ": expected shape " +
                                                  shape_string(expected_shape) + ", found " +
                                                  shape_string(v.shape));
  }
  return v;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

uint64_t WeightStore::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, entry] : entries_) total += entry.info.end - entry.info.begin;
  return total;
}

}  // namespace kernelllm
