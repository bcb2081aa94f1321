// Unit tests of the Tokenizer on small tokenizer.json documents built here: merge order,
// ignore_merges, added tokens, the Llama-3 pre-tokenizer regex, UTF-8 handling in encode,
// decode and StreamDecoder, and clear errors for malformed or unsupported files.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/tokenizer_internal.h"
#include "kernelllm/engine/tokenizer.h"

namespace kernelllm {
namespace {

using nlohmann::json;

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte -> char table written out independently of the implementation.
std::string byte_char(int b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
    if (x == b) {
      std::string out;
      tok::append_utf8(out, static_cast<char32_t>(printable ? x : 256 + n));
      return out;
    }
    if (!printable) ++n;
  }
  return {};
}

// Ids 0..255 are the bytes in byte order, then "bc"=256, "ab"=257, "abc"=258, "xy"=259,
// "aa"=260; added: <|bos|>=300 (special), <|eot|>=301 (special), "<|eot|>!"=302 (plain).
json base_spec(const json& merges, bool ignore_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["bc"] = 256;
  vocab["ab"] = 257;
  vocab["abc"] = 258;
  vocab["xy"] = 259;
  vocab["aa"] = 260;
  const auto added = [](int id, const char* content, bool special) {
    return json{{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},    {"normalized", false}, {"special", special}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({added(300, "<|bos|>", true), added(301, "<|eot|>", true),
                                    added(302, "<|eot|>!", false)})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kLlama3Pattern}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", false},
                                        {"trim_offsets", true},
                                        {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", json::array({300})}, {"tokens", json::array({"<|bos|>"})}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
}

Tokenizer make(const json& spec) {
  auto tok = Tokenizer::from_json(spec.dump());
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return std::move(tok).value();
}

std::vector<int32_t> enc(const Tokenizer& tok, std::string_view text, bool add_special = false) {
  auto ids = tok.encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string dec(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip = false) {
  auto text = tok.decode(ids, skip);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : std::string();
}

constexpr int32_t kA = 'a', kB = 'b', kC = 'c', kX = 'x', kY = 'y';

TEST(Tokenizer, MergesApplyLowestRankFirst) {
  const auto bc_first = make(base_spec(json::array({"b c", "a b", "a bc"}), false));
  EXPECT_EQ(enc(bc_first, "abc"), (std::vector<int32_t>{258}));
  const auto ab_first = make(base_spec(json::array({"a b", "b c", "a bc"}), false));
  EXPECT_EQ(enc(ab_first, "abc"), (std::vector<int32_t>{257, kC}));
  // Merges given as ["a", "b"] pairs behave the same.
  const json pair_merges = json::array({json::array({"a", "b"}), json::array({"b", "c"}), json::array({"a", "bc"})});
  const auto pairs = make(base_spec(pair_merges, false));
  EXPECT_EQ(enc(pairs, "abc"), (std::vector<int32_t>{257, kC}));
}

TEST(Tokenizer, EqualRankMergesGoLeftmostFirst) {
  const auto tok = make(base_spec(json::array({"a a"}), false));
  EXPECT_EQ(enc(tok, "aaa"), (std::vector<int32_t>{260, kA}));
  EXPECT_EQ(enc(tok, "aaaa"), (std::vector<int32_t>{260, 260}));
}

TEST(Tokenizer, IgnoreMergesEmitsAPreTokenFoundWholeInTheVocab) {
  EXPECT_EQ(enc(make(base_spec(json::array({"a b"}), true)), "xy"), (std::vector<int32_t>{259}));
  EXPECT_EQ(enc(make(base_spec(json::array({"a b"}), false)), "xy"), (std::vector<int32_t>{kX, kY}));
  // "abc" is in the vocab: with ignore_merges it wins over the merge path to "ab" + "c".
  EXPECT_EQ(enc(make(base_spec(json::array({"a b", "b c", "a bc"}), true)), "abc"), (std::vector<int32_t>{258}));
}

TEST(Tokenizer, AddedTokensAreSplitOutBeforePreTokenizing) {
  const auto tok = make(base_spec(json::array({"a b"}), true));
  EXPECT_EQ(enc(tok, "ab<|eot|>ab"), (std::vector<int32_t>{257, 301, 257}));
  // Leftmost-longest: the plain added token "<|eot|>!" beats "<|eot|>" at the same start.
  EXPECT_EQ(enc(tok, "<|eot|>!<|eot|>"), (std::vector<int32_t>{302, 301}));
  // Partial special-token text is ordinary text.
  EXPECT_EQ(enc(tok, "<|eot"), (std::vector<int32_t>{'<', '|', 'e', 'o', 't'}));
  EXPECT_EQ(enc(tok, "ab", true), (std::vector<int32_t>{300, 257}));
  EXPECT_EQ(enc(tok, "", true), (std::vector<int32_t>{300}));
  EXPECT_EQ(enc(tok, "", false), (std::vector<int32_t>{}));
  EXPECT_EQ(tok.bos_id(), 300);
}

TEST(Tokenizer, Llama3RegexSplitsLikeTokenizers) {
  auto splitter = tok::RegexSplitter::compile(kLlama3Pattern);
  ASSERT_TRUE(splitter.ok()) << splitter.status().to_string();
  const auto split = [&](std::string_view text) {
    std::vector<std::string_view> pieces;
    EXPECT_TRUE(splitter->split(text, pieces).ok());
    return std::vector<std::string>(pieces.begin(), pieces.end());
  };
  // Expected pieces come from tokenizers' Split(...).pre_tokenize_str on the same text.
  EXPECT_EQ(split("Hello world's  \n\n 123456"),
            (std::vector<std::string>{"Hello", " world", "'s", "  \n\n", " ", "123", "456"}));
  EXPECT_EQ(split("DON'T   stop\tnow!!\r\n"),
            (std::vector<std::string>{"DON", "'T", "  ", " stop", "\tnow", "!!\r\n"}));
  // U+00A0 is Oniguruma whitespace, U+180E is not (PCRE2's own \s would say it is).
  EXPECT_EQ(split("x\u00a0\u00a0y\u180e\u180ez"),
            (std::vector<std::string>{"x", "\u00a0", "\u00a0y", "\u180e\u180e", "z"}));
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  const auto tok = make(base_spec(json::array(), true));
  for (std::string_view bad : {std::string_view("ab\xff"), std::string_view("\xe2\x82"), std::string_view("\xc0\x80"),
                               std::string_view("\xed\xa0\x80")}) {
    auto ids = tok.encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(ids.status().message().find("UTF-8"), std::string::npos) << ids.status().message();
  }
}

TEST(Tokenizer, DecodeReplacesInvalidUtf8LikeFromUtf8Lossy) {
  const auto tok = make(base_spec(json::array(), true));
  const std::string r = "\uFFFD";
  EXPECT_EQ(dec(tok, {0xE2, 0x82, 0xAC}), "\u20AC");
  EXPECT_EQ(dec(tok, {0xE2, 0x82}), r);               // truncated: one replacement
  EXPECT_EQ(dec(tok, {0xE2, 0x82, 'A'}), r + "A");     // broken by an ASCII byte
  EXPECT_EQ(dec(tok, {0xF0, 0x9F, 0x99, 'A'}), r + "A");
  EXPECT_EQ(dec(tok, {0xED, 0xA0, 0x80}), r + r + r);  // surrogate: each byte replaced
  EXPECT_EQ(dec(tok, {0xC0, 0x80}), r + r);            // overlong
  EXPECT_EQ(dec(tok, {0xFF, 'a', 0xE2, 301, 0x82, 0xAC}), r + "a" + r + "<|eot|>" + r + r);
}

TEST(Tokenizer, DecodeSkipsSpecialTokensOnlyOnRequest) {
  const auto tok = make(base_spec(json::array({"a b"}), true));
  const auto ids = enc(tok, "ab<|eot|>!x<|eot|>", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{300, 257, 302, kX, 301}));
  EXPECT_EQ(dec(tok, ids), "<|bos|>ab<|eot|>!x<|eot|>");
  EXPECT_EQ(dec(tok, ids, true), "ab<|eot|>!x");  // 302 is added but not special
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(302));
  EXPECT_FALSE(tok.is_special(257));
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const auto tok = make(base_spec(json::array(), true));
  EXPECT_EQ(tok.vocab_size(), 303);
  for (int32_t id : {-1, 280, 303, 1 << 20}) {
    auto text = tok.decode(std::vector<int32_t>{kA, id});
    ASSERT_FALSE(text.ok()) << id;
    EXPECT_EQ(text.status().code(), ErrorCode::out_of_range);
  }
  EXPECT_EQ(tok.token_bytes(280), "");
}

TEST(Tokenizer, TokenLookupsUseTheByteLevelForm) {
  const auto tok = make(base_spec(json::array(), true));
  EXPECT_EQ(tok.token_to_id("\u0120"), ' ');  // Ġ is the space byte
  EXPECT_EQ(tok.token_to_id("<|eot|>"), 301);
  EXPECT_EQ(tok.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok.token_bytes(' '), " ");
  EXPECT_EQ(tok.token_bytes(0xE2), "\xE2");
  EXPECT_EQ(enc(tok, " \n"), (std::vector<int32_t>{' ', '\n'}));
}

TEST(StreamDecoder, HoldsBackPartialCharactersUntilComplete) {
  const auto tok = make(base_spec(json::array(), true));
  StreamDecoder dec_stream(tok);
  EXPECT_EQ(dec_stream.push('a'), "a");
  EXPECT_EQ(dec_stream.push(0xF0), "");
  EXPECT_EQ(dec_stream.push(0x9F), "");
  EXPECT_EQ(dec_stream.push(0x99), "");
  EXPECT_EQ(dec_stream.push(0x82), "\U0001F642");
  EXPECT_EQ(dec_stream.push(0xE2), "");
  EXPECT_EQ(dec_stream.finish(), "\uFFFD");
  EXPECT_EQ(dec_stream.push(301), "");  // special, skipped by default
}

TEST(StreamDecoder, ConcatenationEqualsDecodeOnRandomByteSequences) {
  const auto tok = make(base_spec(json::array(), true));
  std::mt19937 rng(1234);
  // Bias towards UTF-8 lead and continuation bytes so that partial sequences are common.
  const std::vector<int32_t> pool = {'a', ' ', 0x80, 0x82, 0x99, 0xAC, 0xBF, 0xC3, 0xA9, 0xE2, 0xED,
                                     0xA0, 0xF0, 0x9F, 0xF4, 0x90, 0xC0, 0xFF, 301, 302};
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids(rng() % 12);
    for (auto& id : ids) id = pool[rng() % pool.size()];
    for (bool skip : {false, true}) {
      StreamDecoder stream(tok, skip);
      std::string all;
      for (int32_t id : ids) {
        const std::string part = stream.push(id);
        EXPECT_FALSE(tok::first_invalid_utf8(part).has_value());
        all += part;
      }
      all += stream.finish();
      ASSERT_EQ(all, dec(tok, ids, skip)) << json(ids).dump();
    }
  }
}

Status load_error(const std::string& text) {
  auto tok = Tokenizer::from_json(text);
  return tok.ok() ? Status() : tok.status();
}

TEST(Tokenizer, BadFilesGiveClearErrors) {
  Status s = load_error("{\"model\": ");
  EXPECT_EQ(s.code(), ErrorCode::parse_error);

  json spec = base_spec(json::array(), true);
  spec.erase("model");
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::parse_error);
  EXPECT_NE(s.message().find("model"), std::string::npos) << s.message();

  spec = base_spec(json::array(), true);
  spec["model"]["type"] = "WordPiece";
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::unsupported);
  EXPECT_NE(s.message().find("WordPiece"), std::string::npos) << s.message();

  spec = base_spec(json::array(), true);
  spec["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::unsupported);

  spec = base_spec(json::array(), true);
  spec["added_tokens"][0]["lstrip"] = true;
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::unsupported);

  spec = base_spec(json::array({"q z"}), true);
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::parse_error);
  EXPECT_NE(s.message().find("merges[0]"), std::string::npos) << s.message();

  spec = base_spec(json::array({"a b c"}), true);
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::parse_error);

  spec = base_spec(json::array(), true);
  spec["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::unsupported);

  spec = base_spec(json::array(), true);
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::parse_error);

  spec = base_spec(json::array(), true);
  spec["model"]["byte_fallback"] = true;
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::unsupported);

  spec = base_spec(json::array(), true);
  spec["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::unsupported);

  spec = base_spec(json::array(), true);
  spec["model"]["vocab"]["zz"] = "7";
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::parse_error);
  EXPECT_NE(s.message().find("model.vocab[zz]"), std::string::npos) << s.message();

  spec = base_spec(json::array({"a b", 5}), true);
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::parse_error);
  EXPECT_NE(s.message().find("model.merges[1]"), std::string::npos) << s.message();

  spec = base_spec(json::array({json::array({"a", "b", "c"})}), true);
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::parse_error);

  spec = base_spec(json::array(), true);
  spec["model"]["vocab"] = json::array({"a"});
  s = load_error(spec.dump());
  EXPECT_EQ(s.code(), ErrorCode::parse_error);
  EXPECT_NE(s.message().find("model.vocab"), std::string::npos) << s.message();

  spec = base_spec(json::array(), true);
  spec["model"]["vocab"]["zz"] = 5;  // id 5 is the byte 0x05 already
  EXPECT_EQ(load_error(spec.dump()).code(), ErrorCode::parse_error);

  EXPECT_EQ(load_error("[1, 2]").code(), ErrorCode::parse_error);

  auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace kernelllm
