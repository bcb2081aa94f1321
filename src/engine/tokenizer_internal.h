// Internal pieces of the Tokenizer (include/kernelllm/engine/tokenizer.h): UTF-8 helpers,
// GPT-2 byte-level mapping, the PCRE2 pre-tokenizer and the BPE model. Not a public API.
#pragma once

#include <array>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"

namespace kernelllm::tok {

// ---- UTF-8 -----------------------------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or 0 when the bytes there are
// ill-formed or truncated. `valid_prefix` (if given) gets the length of the longest prefix that
// could still start a well-formed sequence (the Unicode "maximal subpart", >= 1 when s[i] is a
// valid lead byte), so that decoders replace exactly what Rust's from_utf8_lossy replaces.
size_t utf8_sequence_length(std::string_view s, size_t i, size_t* valid_prefix = nullptr);

// Byte offset of the first ill-formed UTF-8 sequence, or nullopt when `s` is valid.
std::optional<size_t> first_invalid_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view s);

// Length of a trailing truncated-but-so-far-valid UTF-8 sequence in `s` (0 when none): the bytes a
// streaming decoder must hold back until a later token completes them.
size_t utf8_incomplete_tail(std::string_view s);

void append_utf8(std::string& out, char32_t cp);

// ---- byte-level (GPT-2) mapping -------------------------------------------------------------

// Each byte maps to one printable code point: 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF to
// themselves, the other 68 bytes to U+0100.. in byte order (tokenizers' bytes_char()).
struct ByteLevel {
  ByteLevel();
  std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the code point for each byte
  std::unordered_map<char32_t, uint8_t> char_to_byte;

  std::string encode(std::string_view raw) const;  // raw bytes -> byte-level string
  // tokenizers' ByteLevel decoder, per token: the bytes of its chars when every char is a
  // byte-level char, else the token's own UTF-8.
  std::string decode_token(std::string_view token) const;
};

const ByteLevel& byte_level();  // the one shared table

// ---- pre-tokenizer: Split(regex, Isolated) --------------------------------------------------

class RegexSplitter {
 public:
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Compiles an Oniguruma-syntax pattern (as tokenizers uses) with PCRE2 UTF + UCP, JIT when
  // available. `\s`/`\S` are rewritten to Oniguruma's Unicode White_Space set.
  static Result<RegexSplitter> compile(std::string_view pattern);

  // Appends the Isolated split of valid UTF-8 `text` (matches and the gaps between them) to
  // `pieces` as views into `text`.
  Status split(std::string_view text, std::vector<std::string_view>& pieces) const;

  bool jit() const { return jit_; }

 private:
  RegexSplitter() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Exposed for tests: Oniguruma `\s`, `\S` -> explicit PCRE2 classes.
Result<std::string> translate_pattern(std::string_view pattern);

// ---- BPE model ------------------------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class Bpe {
 public:
  using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  // `merges[r]` = (left id, right id) of rank r; the merged token must be in the vocab.
  Bpe(Vocab vocab, const std::vector<std::pair<int32_t, int32_t>>& merge_pairs,
      const std::vector<int32_t>& merged_ids, bool ignore_merges);

  const Vocab& vocab() const { return vocab_; }

  // Appends the ids of one pre-token given as raw bytes.
  void encode_piece(std::string_view raw, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view raw, std::vector<int32_t>& out) const;

  Vocab vocab_;
  // (left << 32 | right) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single byte's token, -1 when absent
  bool ignore_merges_ = false;

  // Per-pre-token results; cleared when full (pre-tokens repeat heavily in code).
  static constexpr size_t kCacheEntries = 1 << 16;
  static constexpr size_t kCacheMaxPieceBytes = 128;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

// ---- added tokens ---------------------------------------------------------------------------

struct Segment {
  std::string_view text;
  int32_t id;  // the added token's id, or -1 for text still to pre-tokenize
};

// Leftmost-longest matching of added-token contents, like tokenizers' AhoCorasick
// (MatchKind::LeftmostLongest) over the raw text.
class AddedTokenMatcher {
 public:
  void add(std::string content, int32_t id);  // content must be non-empty
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Entry {
    std::string content;
    int32_t id;
  };
  std::map<uint8_t, std::vector<Entry>> by_first_byte_;  // each list longest first
};

// ---- the loaded tokenizer -------------------------------------------------------------------

enum class TokenKind : uint8_t { none, model, added, special };

struct TokenizerData {
  std::unique_ptr<Bpe> bpe;
  std::optional<RegexSplitter> splitter;
  AddedTokenMatcher raw_added;         // added tokens with normalized=false
  AddedTokenMatcher normalized_added;  // added tokens with normalized=true
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_ids;
  std::vector<int32_t> prefix_ids;  // post-processor tokens before the sequence (BOS)
  std::vector<int32_t> suffix_ids;  // and after it
  std::vector<std::string> bytes;   // [vocab_size] raw bytes each id decodes to
  std::vector<TokenKind> kind;      // [vocab_size]
  int32_t vocab_size = 0;
};

// tokenizer.json split by a streaming parse: model.vocab and model.merges as flat lists (nullopt
// when absent or not of the bulk shape), everything else as a DOM in `root`.
struct TokenizerJson {
  Json root;
  std::optional<std::vector<std::pair<std::string, int64_t>>> vocab;
  std::optional<std::vector<std::pair<std::string, std::string>>> merges;
};
Result<TokenizerJson> read_tokenizer_json(std::string_view text);

// Parses tokenizer.json text into `out`; unsupported configurations are rejected.
Status load_tokenizer(std::string_view json_text, TokenizerData& out);

}  // namespace kernelllm::tok
