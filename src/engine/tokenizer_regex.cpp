// The Split pre-tokenizer (behavior Isolated) run by PCRE2 in UTF + UCP mode, JIT-compiled when
// the platform allows, the interpreter otherwise. tokenizers runs these patterns with
// Oniguruma, whose Unicode `\s` is the White_Space property; PCRE2's UCP `\s` differs (it adds
// U+180E, for one), so `\s`/`\S` are rewritten to that exact set before compiling.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "engine/tokenizer_internal.h"

namespace kernelllm::tok {
namespace {

// Oniguruma (ONIG_ENCODING_UTF8) \s: U+0009-000D, U+0085 and General_Category Z (Zs, Zl, Zp).
constexpr std::string_view kSpaceSet = "\\t-\\r\\x{85}\\p{Z}";

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

Result<std::string> translate_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index just after '[' or '[^', where ']' is still literal
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) {
        return error(ErrorCode::parse_error, "pre-tokenizer regex ends with a lone backslash");
      }
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kSpaceSet) : fmt::format("[{}]", kSpaceSet);
      } else if (e == 'S') {
        if (in_class) {
          return error(ErrorCode::unsupported, "pre-tokenizer regex: \\S inside a character class");
        }
        out += fmt::format("[^{}]", kSpaceSet);
      } else if (e == 'Q') {
        return error(ErrorCode::unsupported, "pre-tokenizer regex: \\Q...\\E quoting");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[') {
      return error(ErrorCode::unsupported, "pre-tokenizer regex: nested character class or POSIX bracket");
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept : code_(other.code_), jit_(other.jit_) {
  other.code_ = nullptr;
}

RegexSplitter& RegexSplitter::operator=(RegexSplitter&& other) noexcept {
  if (this != &other) {
    if (code_) pcre2_code_free(as_code(code_));
    code_ = other.code_;
    jit_ = other.jit_;
    other.code_ = nullptr;
  }
  return *this;
}

RegexSplitter::~RegexSplitter() {
  if (code_) pcre2_code_free(as_code(code_));
}

Result<RegexSplitter> RegexSplitter::compile(std::string_view pattern) {
  KLLM_ASSIGN_OR_RETURN(std::string translated, translate_pattern(pattern));
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return error(ErrorCode::parse_error,
                 fmt::format("pre-tokenizer regex does not compile at offset {}: {} (pattern {})", err_offset,
                             reinterpret_cast<const char*>(msg), translated));
  }
  RegexSplitter splitter;
  splitter.code_ = code;
  // JIT is an optimisation only: pcre2_match() falls back to the interpreter without it.
  splitter.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return splitter;
}

Status RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pcre2_code* code = as_code(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  // A larger JIT stack is made only when the default 32 KiB one runs out (long inputs with
  // heavy backtracking); one per call keeps split() safe to run from several threads.
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(nullptr, &pcre2_jit_stack_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(nullptr, &pcre2_match_context_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), ctx.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {
      stack.reset(pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr));
      ctx.reset(pcre2_match_context_create(nullptr));
      if (!stack || !ctx) return error(ErrorCode::resource_exhausted, "cannot allocate a PCRE2 JIT stack");
      pcre2_jit_stack_assign(ctx.get(), nullptr, stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return error(ErrorCode::internal, fmt::format("pre-tokenizer regex match failed at byte {}: {}", pos,
                                                    reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    if (end == start) {
      // Empty matches produce no piece; step over one character.
      pos = start + std::max<size_t>(1, utf8_sequence_length(text, start));
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    pieces.push_back(text.substr(start, end - start));
    gap_start = pos = end;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
  return {};
}

}  // namespace kernelllm::tok
