// Parity of the C++ Tokenizer with HF `tokenizers` on the toy Llama-3-style tokenizer made by
// tools/make_toy_tokenizer.py: ids with and without special tokens, decode with and without
// skipping special tokens, streaming decode, for every corpus entry in golden.json.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernelllm/base/file.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

fs::path tokenizer_dir() {
  const char* root = std::getenv("KERNELLLM_TESTDATA");
  if (root == nullptr) ADD_FAILURE() << "KERNELLLM_TESTDATA is not set (run tools/make_test_data.py)";
  return root == nullptr ? fs::path() : fs::path(root) / "tokenizer";
}

class TokenizerParity : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = tokenizer_dir();
    ASSERT_FALSE(dir.empty());
    ASSERT_TRUE(fs::exists(dir / "tokenizer.json")) << dir / "tokenizer.json";
    ASSERT_TRUE(fs::exists(dir / "golden.json")) << dir / "golden.json";
    const auto t0 = std::chrono::steady_clock::now();
    auto tok = Tokenizer::from_file(dir / "tokenizer.json");
    const auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    std::printf("tokenizer.json loaded in %.1f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
    tok_.emplace(std::move(tok).value());
    auto text = read_text_file(dir / "golden.json");
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    golden_ = nlohmann::json::parse(*text);
  }

  std::optional<Tokenizer> tok_;
  nlohmann::json golden_;
};

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder dec(tok, skip);
  std::string out;
  for (int32_t id : ids) out += dec.push(id);
  return out + dec.finish();
}

TEST_F(TokenizerParity, EncodeMatchesHfForEveryCorpusEntry) {
  const auto& cases = golden_.at("encode_cases");
  ASSERT_GE(cases.size(), 40u);
  size_t ids_compared = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    SCOPED_TRACE(text.substr(0, 80));
    for (const auto& [key, add] : {std::pair{"ids", true}, std::pair{"ids_no_special", false}}) {
      const auto expected = c.at(key).get<std::vector<int32_t>>();
      auto got = tok_->encode(text, add);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(*got, expected) << key;
      ids_compared += expected.size();
    }
  }
  std::printf("encode: %zu texts, %zu ids compared\n", cases.size(), ids_compared);
}

TEST_F(TokenizerParity, DecodeAndStreamMatchHf) {
  size_t compared = 0;
  for (const char* group : {"encode_cases", "decode_cases"}) {
    for (const auto& c : golden_.at(group)) {
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      for (const auto& [key, skip] : {std::pair{"decoded", false}, std::pair{"decoded_skip_special", true}}) {
        const std::string expected = c.at(key);
        auto got = tok_->decode(ids, skip);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        EXPECT_EQ(*got, expected) << group << " " << key << " " << nlohmann::json(ids).dump();
        EXPECT_EQ(stream_decode(*tok_, ids, skip), expected) << group << " stream " << key;
        ++compared;
      }
    }
  }
  std::printf("decode: %zu decodes compared (plus the same number streamed)\n", compared);
}

TEST_F(TokenizerParity, SpecialTokensHaveLlama3Ids) {
  EXPECT_EQ(tok_->token_to_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(tok_->token_to_id("<|end_of_text|>"), 128001);
  EXPECT_EQ(tok_->token_to_id("<|start_header_id|>"), 128006);
  EXPECT_EQ(tok_->token_to_id("<|eom_id|>"), 128008);
  EXPECT_EQ(tok_->token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok_->token_to_id("<|python_tag|>"), 128010);
  EXPECT_EQ(tok_->token_to_id("<|reserved_special_token_247|>"), 128255);
  EXPECT_EQ(tok_->bos_id(), 128000);
  EXPECT_EQ(tok_->vocab_size(), 128256);
  for (int32_t id = 128000; id < 128256; ++id) EXPECT_TRUE(tok_->is_special(id)) << id;
  EXPECT_FALSE(tok_->is_special(198));
}

TEST_F(TokenizerParity, ReportsEncodeSpeedOnTheLongestText) {
  std::string longest;
  for (const auto& c : golden_.at("encode_cases")) {
    const std::string t = c.at("text");
    if (t.size() > longest.size()) longest = t;
  }
  std::string big;
  while (big.size() < 200000) big += longest;
  const auto t0 = std::chrono::steady_clock::now();
  auto ids = tok_->encode(big);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ids.ok());
  auto one = tok_->encode(longest);
  ASSERT_TRUE(one.ok());
  const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  std::printf("encode: %zu bytes -> %zu ids in %.1f ms (%.2f MB/s); prompt of %zu ids\n", big.size(), ids->size(),
              ms, static_cast<double>(big.size()) / ms / 1e3, one->size());
  auto back = tok_->decode(*ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "<|begin_of_text|>" + big);
}

}  // namespace
}  // namespace kernelllm
