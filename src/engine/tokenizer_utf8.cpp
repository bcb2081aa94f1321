// UTF-8 validation and lossy conversion (Rust from_utf8_lossy semantics, as the `tokenizers`
// decoders use) and the GPT-2 byte-level byte <-> code point table.
#include "engine/tokenizer_internal.h"

namespace kernelllm::tok {

size_t utf8_sequence_length(std::string_view s, size_t i, size_t* valid_prefix) {
  // Unicode Table 3-7 (well-formed byte sequences): the allowed range of the second byte
  // depends on the lead; later bytes are always 80..BF.
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) {
    if (valid_prefix) *valid_prefix = 1;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 == 0xE0) {
    need = 3, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 3;
  } else if (b0 == 0xED) {
    need = 3, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 4, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 4;
  } else if (b0 == 0xF4) {
    need = 4, hi = 0x8F;
  } else {
    if (valid_prefix) *valid_prefix = 1;  // not a lead byte: replaced alone
    return 0;
  }
  size_t k = 1;
  for (; k < need && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  if (valid_prefix) *valid_prefix = k;
  return k == need ? need : 0;
}

std::optional<size_t> first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t prefix = 0;
    const size_t n = utf8_sequence_length(s, i, &prefix);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += prefix;
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t prefix = 0;
    const size_t n = utf8_sequence_length(s, i, &prefix);
    if (n > 0) {
      i += n;
    } else if (i + prefix == s.size() && static_cast<uint8_t>(s[i]) >= 0xC2 &&
               static_cast<uint8_t>(s[i]) <= 0xF4) {
      return prefix;  // a valid lead whose continuation bytes simply have not arrived yet
    } else {
      i += prefix;
    }
  }
  return 0;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Decodes the well-formed UTF-8 sequence of length n at s[i].
char32_t decode_at(std::string_view s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

}  // namespace

ByteLevel::ByteLevel() {
  // https://github.com/openai/gpt-2/blob/master/src/encoder.py bytes_to_unicode(), which
  // tokenizers' byte_level.rs bytes_char() reproduces.
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    append_utf8(byte_to_utf8[static_cast<size_t>(b)], cp);
    char_to_byte.emplace(cp, static_cast<uint8_t>(b));
  }
}

std::string ByteLevel::encode(std::string_view raw) const {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::string ByteLevel::decode_token(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_sequence_length(token, i);
    if (n == 0) return std::string(token);
    const auto it = char_to_byte.find(decode_at(token, i, n));
    if (it == char_to_byte.end()) return std::string(token);
    out.push_back(static_cast<char>(it->second));
    i += n;
  }
  return out;
}

const ByteLevel& byte_level() {
  static const ByteLevel table;
  return table;
}

}  // namespace kernelllm::tok
