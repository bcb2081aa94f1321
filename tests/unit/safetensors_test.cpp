// safetensors: files this test writes byte by byte (single, sharded, every dtype we read,
// metadata), each malformed-header rejection, WeightStore lookups, and a seeded mutation
// run asserting the parser never accepts a header pointing outside its buffer.
#include "kernelllm/engine/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<std::byte> to_bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// 8-byte little-endian length, the header text as given, then `data`.
std::vector<std::byte> raw_file(const std::string& header, const std::vector<uint8_t>& data, uint64_t length) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((length >> (8 * i)) & 0xff));
  auto h = to_bytes(header);
  out.insert(out.end(), h.begin(), h.end());
  for (uint8_t b : data) out.push_back(std::byte(b));
  return out;
}
std::vector<std::byte> raw_file(const std::string& header, const std::vector<uint8_t>& data = {}) {
  return raw_file(header, data, header.size());
}

// A well-formed file: tensors packed in the order given, optional metadata.
std::vector<std::byte> make_file(const std::vector<RawTensor>& tensors, const Json& metadata = nullptr) {
  Json header = Json::object();
  std::vector<uint8_t> data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return raw_file(header.dump(), data);
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i);
  return v;
}

Result<SafetensorsHeader> parse(const std::vector<std::byte>& file) { return parse_safetensors_header(file); }

// Parses `header` (with `data` after it) and expects an error whose message holds every needle.
void expect_rejected(const std::string& header, const std::vector<uint8_t>& data,
                     std::initializer_list<std::string_view> needles) {
  auto r = parse(raw_file(header, data));
  ASSERT_FALSE(r.ok()) << header;
  for (auto needle : needles) {
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << "missing \"" << needle << "\" in: " << r.status().message();
  }
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("kllm_st_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::vector<std::byte>& bytes) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  fs::path path_;
};

const std::vector<RawTensor> kTensors = {
    {"model.norm.weight", "F32", {4}, iota_bytes(16)},
    {"model.embed_tokens.weight", "BF16", {3, 2}, iota_bytes(12, 100)},
    {"lm_head.weight", "F16", {2, 3}, iota_bytes(12, 200)},
    {"empty", "F32", {0, 5}, {}},
    {"ids", "I32", {2}, iota_bytes(8, 50)},
};

TEST(SafetensorsHeader, ParsesWellFormedFileWithMetadata) {
  auto file = make_file(kTensors, Json{{"format", "pt"}});
  auto r = parse(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->metadata.at("format"), "pt");
  ASSERT_EQ(r->tensors.size(), kTensors.size());
  // Data order (empty tensors sort at their offset, before a tensor starting there).
  uint64_t expected_data_offset = file.size() - (16 + 12 + 12 + 8);
  EXPECT_EQ(r->data_offset, expected_data_offset);
  const TensorInfo& norm = r->tensors[0];
  EXPECT_EQ(norm.name, "model.norm.weight");
  EXPECT_EQ(norm.dtype, DType::f32);
  EXPECT_EQ(norm.shape, std::vector<int64_t>{4});
  EXPECT_EQ(norm.begin, 0u);
  EXPECT_EQ(norm.end, 16u);
  EXPECT_EQ(r->tensors[1].dtype, DType::bf16);
  EXPECT_EQ(r->tensors[1].numel(), 6);
  EXPECT_EQ(r->tensors[2].dtype, DType::f16);
}

TEST(SafetensorsHeader, AcceptsUnalignedOffsetsAndPaddedHeader) {
  // Header padded with spaces as the reference writer does; a 1-byte tensor first makes the next one unaligned.
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header += "   ";
  auto r = parse(raw_file(header, iota_bytes(5)));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tensors[1].begin, 1u);
}

TEST(SafetensorsHeader, RejectsShortAndTruncatedFiles) {
  for (size_t n = 0; n < 8; ++n) {
    std::vector<std::byte> file(n, std::byte{0});
    auto r = parse(file);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("at least 8 bytes"), std::string::npos);
  }
  auto good = make_file(kTensors);
  for (size_t cut : {size_t{8}, size_t{9}, good.size() / 2, good.size() - 1}) {
    std::vector<std::byte> file(good.begin(), good.begin() + static_cast<ptrdiff_t>(cut));
    EXPECT_FALSE(parse(file).ok()) << "cut at " << cut;
  }
}

TEST(SafetensorsHeader, RejectsHeaderLengthPastEndOrOverCap) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  auto r = parse(raw_file(header, {7}, header.size() + 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::out_of_range);
  EXPECT_NE(r.status().message().find("past the end"), std::string::npos) << r.status().message();

  r = parse(raw_file(header, {7}, uint64_t{200'000'000}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 100000000"), std::string::npos) << r.status().message();

  r = parse(raw_file(header, {7}, ~uint64_t{0}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::out_of_range);
}

TEST(SafetensorsHeader, RejectsBadJsonAndNonObjects) {
  expect_rejected(R"({"a": {"dtype": "F32",)", {}, {"invalid JSON"});
  expect_rejected("[1, 2]", {}, {"expected a JSON object", "array"});
  expect_rejected(R"({"a": [1, 2]})", {}, {"\"a\"", "expected an object", "array"});
  expect_rejected(R"({"__metadata__": {"k": 1}})", {}, {"__metadata__", "expected string", "integer"});
  expect_rejected(R"({"__metadata__": "x"})", {}, {"__metadata__", "expected an object"});
}

TEST(SafetensorsHeader, RejectsBadDtypeAndShape) {
  expect_rejected(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", {1}, {"\"w\"", "Q4", "expected dtype"});
  expect_rejected(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", {1}, {"\"w\"", "dtype"});
  expect_rejected(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", {1}, {"\"w\"", "dtype"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", {1}, {"\"w\"", "non-negative", "-1"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", {1}, {"\"w\"", "1.5"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", {1}, {"\"w\"", "shape", "string"});
  expect_rejected(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", {1}, {"\"w\"", "shape", "nothing"});
  expect_rejected(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", {1, 2, 3, 4},
                  {"\"w\"", "overflows"});
  expect_rejected(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", {},
                  {"\"w\"", "overflows"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}})", {1},
                  {"\"w\"", "non-negative"});
}

TEST(SafetensorsHeader, RejectsBadOffsets) {
  expect_rejected(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", {1, 2}, {"\"w\"", "data_offsets", "[0]"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})", {1, 2}, {"\"w\"", "begin <= end"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,"2"]}})", {1, 2}, {"\"w\"", "data_offsets"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", {1, 2}, {"\"w\""});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[2]}})", {1, 2}, {"\"w\"", "nothing"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", {1, 2},
                  {"\"w\"", "data area of 2 bytes", "end 4"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})",
                  {1}, {"\"w\"", "data area"});
  expect_rejected(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", {1, 2, 3, 4},
                  {"\"w\"", "expected 8 bytes", "BF16", "[2, 2]", "found 4"});
  expect_rejected(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                  R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                  {1, 2, 3, 4}, {"\"b\"", "overlaps \"a\"", "at or after byte 3", "found 2"});
  expect_rejected(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                  R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                  {1, 2, 3, 4}, {"overlaps"});
}

// Found by the libFuzzer target: printing a deeply nested value recursed until the stack ran out.
TEST(SafetensorsHeader, DeeplyNestedJsonIsAnErrorNotACrash) {
  const std::string deep = std::string(500'000, '[') + std::string(500'000, ']');
  expect_rejected(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":)" + deep + "}}", {1},
                  {"\"w\"", "data_offsets", "array of 1 items"});
  expect_rejected(R"({"w":{"dtype":"U8","shape":[)" + deep + R"(],"data_offsets":[0,1]}})", {1},
                  {"\"w\"", "shape entries", "array of 1 items"});
  expect_rejected(deep, {}, {"expected a JSON object"});
}

TEST(WeightStore, OpensSingleFileAndDirectory) {
  TempDir dir;
  dir.write("model.safetensors", make_file(kTensors, Json{{"format", "pt"}}));
  for (const fs::path& p : {dir.path() / "model.safetensors", dir.path()}) {
    auto store = WeightStore::open(p);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    EXPECT_EQ(store->names(), (std::vector<std::string>{"empty", "ids", "lm_head.weight", "model.embed_tokens.weight",
                                                        "model.norm.weight"}));
    EXPECT_EQ(store->total_bytes(), 16u + 12 + 12 + 8);
    for (const RawTensor& t : kTensors) {
      auto v = store->get(t.name);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->name, t.name);
      EXPECT_EQ(dtype_name(v->dtype), t.dtype);
      EXPECT_EQ(std::vector<int64_t>(v->shape.begin(), v->shape.end()), t.shape);
      ASSERT_EQ(v->data.size(), t.bytes.size());
      EXPECT_TRUE(std::equal(t.bytes.begin(), t.bytes.end(), reinterpret_cast<const uint8_t*>(v->data.data())))
          << t.name;
    }
    EXPECT_TRUE(store->contains("lm_head.weight"));
    EXPECT_FALSE(store->contains("lm_head"));
  }
}

TEST(WeightStore, GetFloatChecksDtypeAndShape) {
  TempDir dir;
  dir.write("model.safetensors", make_file(kTensors));
  auto store = WeightStore::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const int64_t norm_shape[] = {4};
  const int64_t emb_shape[] = {3, 2};
  const int64_t head_shape[] = {2, 3};
  EXPECT_TRUE(store->get_float("model.norm.weight", norm_shape).ok());
  EXPECT_TRUE(store->get_float("model.embed_tokens.weight", emb_shape).ok());
  EXPECT_TRUE(store->get_float("lm_head.weight", head_shape).ok());

  const int64_t wrong[] = {64};
  auto r = store->get_float("model.norm.weight", wrong);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "model.norm.weight: expected shape [64], found [4]");
  r = store->get_float("lm_head.weight", emb_shape);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "lm_head.weight: expected shape [3, 2], found [2, 3]");

  const int64_t ids_shape[] = {2};
  r = store->get_float("ids", ids_shape);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected dtype F32, F16 or BF16, found I32"), std::string::npos);

  r = store->get("model.layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos);
}

Json index_for(const std::map<std::string, std::string>& weight_map) {
  return Json{{"metadata", {{"total_size", 40}}}, {"weight_map", weight_map}};
}

TEST(WeightStore, OpensShardedCheckpoint) {
  TempDir dir;
  dir.write("model-00001-of-00002.safetensors", make_file({kTensors[0], kTensors[1]}));
  dir.write("model-00002-of-00002.safetensors", make_file({kTensors[2], kTensors[4]}));
  dir.write("model.safetensors.index.json", index_for({{"model.norm.weight", "model-00001-of-00002.safetensors"},
                                                       {"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                                                       {"lm_head.weight", "model-00002-of-00002.safetensors"},
                                                       {"ids", "model-00002-of-00002.safetensors"}})
                                                .dump());
  auto store = WeightStore::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(store->names().size(), 4u);
  EXPECT_EQ(store->total_bytes(), 16u + 12 + 12 + 8);
  auto head = store->get("lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(std::memcmp(head->data.data(), kTensors[2].bytes.data(), 12), 0);
  auto norm = store->get("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(std::memcmp(norm->data.data(), kTensors[0].bytes.data(), 16), 0);

  // The store stays valid after being moved (views point into mappings it owns).
  WeightStore moved = std::move(*store);
  auto again = moved.get("ids");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::memcmp(again->data.data(), kTensors[4].bytes.data(), 8), 0);
}

TEST(WeightStore, ShardedErrorsNameTheShardAndTensor) {
  TempDir dir;
  dir.write("a.safetensors", make_file({kTensors[0]}));
  dir.write("model.safetensors.index.json",
            index_for({{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "b.safetensors"}}).dump());
  auto r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("b.safetensors"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("lm_head.weight"), std::string::npos) << r.status().message();

  dir.write("model.safetensors.index.json",
            index_for({{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "a.safetensors"}}).dump());
  r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"lm_head.weight\" expected in shard a.safetensors, found in no shard"),
            std::string::npos)
      << r.status().message();

  dir.write("model.safetensors.index.json", index_for({{"model.norm.weight", "../a.safetensors"}}).dump());
  r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plain file name"), std::string::npos) << r.status().message();

  dir.write("model.safetensors.index.json", R"({"metadata": {}})");
  r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("weight_map"), std::string::npos) << r.status().message();

  dir.write("model.safetensors.index.json", "{not json");
  r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::parse_error);
}

TEST(WeightStore, BadShardFileIsNamed) {
  TempDir dir;
  auto bad = make_file({kTensors[0]});
  bad.resize(bad.size() - 3);  // data area now too short for the tensor
  dir.write("model.safetensors", bad);
  auto r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("model.norm.weight"), std::string::npos) << r.status().message();
}

TEST(WeightStore, MissingFilesAreNotFound) {
  TempDir dir;
  auto r = WeightStore::open(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("model.safetensors.index.json"), std::string::npos);
  r = WeightStore::open(dir.path() / "nothing.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
}

// Checks the invariants a consumer relies on for an accepted header.
void expect_consistent(const SafetensorsHeader& h, size_t file_size) {
  ASSERT_LE(h.data_offset, file_size);
  const uint64_t data_size = file_size - h.data_offset;
  uint64_t prev_end = 0;
  for (const TensorInfo& t : h.tensors) {
    ASSERT_LE(t.begin, t.end) << t.name;
    ASSERT_LE(t.end, data_size) << t.name;
    ASSERT_EQ(t.end - t.begin, static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype)) << t.name;
    if (t.begin != t.end) {
      ASSERT_GE(t.begin, prev_end) << t.name;
      prev_end = t.end;
    }
  }
}

TEST(SafetensorsHeader, SeededMutationsNeverEscapeTheBuffer) {
  const auto good = make_file(kTensors, Json{{"format", "pt"}});
  const size_t header_end = good.size() - 48;  // mutate mostly inside the JSON
  std::mt19937 rng(20251122);
  int accepted = 0;
  int rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<std::byte> f = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      const size_t limit = std::min(f.size(), header_end);
      const size_t pos = rng() % limit;
      switch (rng() % 5) {
        case 0: f[pos] ^= std::byte(1u << (rng() % 8)); break;
        case 1: f[pos] = std::byte("0123456789[]{},:\"-"[rng() % 18]); break;
        case 2: f.insert(f.begin() + static_cast<ptrdiff_t>(pos), std::byte(rng() & 0xff)); break;
        case 3: f.erase(f.begin() + static_cast<ptrdiff_t>(pos)); break;
        case 4: f.resize(rng() % (f.size() + 1)); break;
      }
    }
    auto r = parse_safetensors_header(f);
    if (r.ok()) {
      ++accepted;
      expect_consistent(*r, f.size());
    } else {
      ++rejected;
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  // Some mutations (e.g. inside a metadata string or a no-op digit) keep the file valid.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 2000);
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace kernelllm
