// Llama-3 style tokenizer read from an HF tokenizer.json: byte-level BPE (with
// `ignore_merges`), a Split pre-tokenizer regex run by PCRE2 (UTF + UCP, JIT), added and
// special tokens split out of the raw text before BPE, the TemplateProcessing/BOS
// post-processor, and a ByteLevel decoder. Reproduces the `tokenizers` library's output ids
// exactly for the configurations KernelLLM uses; other configurations are rejected with a
// clear error rather than approximated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"

namespace kernelllm {

class Tokenizer {
 public:
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  static Result<Tokenizer> from_file(const std::filesystem::path& path);
  static Result<Tokenizer> from_json(std::string_view json_text);

  // `text` must be valid UTF-8 (an error otherwise). With add_special_tokens the
  // post-processor's tokens (BOS for Llama-3) are added, as HF's encode() does by default.
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = true) const;

  // Concatenates token bytes; invalid UTF-8 in the result is replaced by U+FFFD as HF does.
  // Ids that name no token (negative, >= vocab_size(), or in a gap of the vocab) are an error
  // (HF drops them silently).
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes a token stands for (byte-level decoded), empty for out-of-range ids.
  std::string token_bytes(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;  // vocab or added token
  bool is_special(int32_t id) const;                                 // added token marked special
  std::optional<int32_t> bos_id() const;  // the post-processor's leading special token, if any
  int32_t vocab_size() const;             // highest id + 1 over vocab and added tokens

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental decode for streaming: push() returns only complete UTF-8 text, holding back
// the bytes of a character that a later token will finish; finish() flushes what is left
// (invalid leftovers become U+FFFD). Concatenating all outputs equals decode() of all ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an unfinished UTF-8 sequence
};

}  // namespace kernelllm
