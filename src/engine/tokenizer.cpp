// Tokenizer (include/kernelllm/engine/tokenizer.h): encode/decode, added-token splitting, the
// post-processor template and StreamDecoder. tokenizer_{json,load}.cpp read tokenizer.json into Impl;
// BPE, regex and UTF-8 helpers live in tokenizer_{bpe,regex,utf8}.cpp.
#include "kernelllm/engine/tokenizer.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/tokenizer_internal.h"
#include "kernelllm/base/file.h"

namespace kernelllm {

using tok::Segment;
using tok::TokenKind;
using tok::utf8_lossy;

struct Tokenizer::Impl : tok::TokenizerData {};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text) {
  auto impl = std::make_unique<Impl>();
  KLLM_RETURN_IF_ERROR(tok::load_tokenizer(json_text, *impl));
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::from_file(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  auto tokenizer = from_json(*text);
  if (!tokenizer.ok()) return tokenizer.status().with_context(path.string());
  return tokenizer;
}

void tok::AddedTokenMatcher::add(std::string content, int32_t id) {
  const auto first = static_cast<uint8_t>(content[0]);
  auto& list = by_first_byte_[first];
  list.push_back({std::move(content), id});
  // Longest first, so the first hit at a position is the leftmost-longest match.
  std::stable_sort(list.begin(), list.end(),
                   [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
}

void tok::AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t gap = 0;
  for (size_t i = 0; i < text.size();) {
    const auto it = by_first_byte_.find(static_cast<uint8_t>(text[i]));
    const Entry* hit = nullptr;
    if (it != by_first_byte_.end()) {
      for (const Entry& e : it->second) {
        if (text.substr(i).starts_with(e.content)) {
          hit = &e;
          break;
        }
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > gap) out.push_back({text.substr(gap, i - gap), -1});
    out.push_back({text.substr(i, hit->content.size()), hit->id});
    i += hit->content.size();
    gap = i;
  }
  if (gap < text.size()) out.push_back({text.substr(gap), -1});
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = tok::first_invalid_utf8(text)) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("encode: expected valid UTF-8 text, found an ill-formed sequence at byte {} (0x{:02X})",
                             *bad, static_cast<uint8_t>(text[*bad])));
  }
  const Impl& im = *impl_;
  // tokenizers' AddedVocabulary: tokens with normalized=false are split out of the raw text
  // first, then tokens with normalized=true out of what is left (no normalizer here).
  std::vector<Segment> raw_split;
  im.raw_added.split(text, raw_split);
  std::vector<Segment> segments;
  for (const Segment& s : raw_split) {
    if (s.id >= 0) {
      segments.push_back(s);
    } else {
      im.normalized_added.split(s.text, segments);
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), im.prefix_ids.begin(), im.prefix_ids.end());
  std::vector<std::string_view> pieces;
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    pieces.clear();
    KLLM_RETURN_IF_ERROR(im.splitter->split(s.text, pieces));
    for (std::string_view piece : pieces) im.bpe->encode_piece(piece, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), im.suffix_ids.begin(), im.suffix_ids.end());
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= im.vocab_size || im.kind[static_cast<size_t>(id)] == TokenKind::none) {
      return error(ErrorCode::out_of_range,
                   fmt::format("decode: token id {} is not in the vocabulary (ids 0..{})", id, im.vocab_size - 1));
    }
    if (skip_special_tokens && im.kind[static_cast<size_t>(id)] == TokenKind::special) continue;
    bytes += im.bytes[static_cast<size_t>(id)];
  }
  return utf8_lossy(bytes);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return {};
  return impl_->bytes[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  const auto& vocab = impl_->bpe->vocab();
  if (const auto it = vocab.find(token); it != vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->kind[static_cast<size_t>(id)] == TokenKind::special;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  if (impl_->prefix_ids.empty()) return std::nullopt;
  return impl_->prefix_ids.front();
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  // Everything before a trailing truncated sequence is final: from_utf8_lossy resolves each
  // sequence from its own bytes, so later bytes cannot change it.
  const size_t ready = pending_.size() - tok::utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace kernelllm
