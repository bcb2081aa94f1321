// The Triton prompt template: a small reader for Python string-literal assignments (to take
// PROMPT_TEMPLATE out of a model's kernelllm.py without running Python), our built-in template,
// and Python str.format for the one-field case.
#include "kernelllm/pipeline/prompt.h"

#include <cstdint>
#include <optional>

#include <fmt/format.h>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

// Same shape as KernelLLM's template (see the header); our own words and example code.
// Braces are format syntax here: the only one is the "{}" field for the user's module.
constexpr std::string_view kBuiltinTemplate = R"TEMPLATE(
<|begin_of_text|>Your job is to make the given PyTorch architecture faster by writing custom Triton kernels for some or all of its operators.

Pick whichever operators you like to replace; leave the rest as they are. Consider fusing several operators into one kernel (for instance a matmul followed by its activation), or changing the algorithm altogether (for instance an online softmax).


The example below shows how a Triton kernel is written and called from a torch module. The example architecture is:
```
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    # example inputs for forward()
    return [torch.randn(4, 256).cuda(), torch.randn(4, 256).cuda()]


def get_init_inputs():
    # arguments for Model's constructor
    return []

```
The same architecture rewritten with a Triton kernel:
```
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, numel, BLOCK: tl.constexpr):
    # one program instance adds one BLOCK-sized slice
    idx = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = idx < numel
    lhs = tl.load(a_ptr + idx, mask=in_bounds)
    rhs = tl.load(b_ptr + idx, mask=in_bounds)
    tl.store(out_ptr + idx, lhs + rhs, mask=in_bounds)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # the wrapper: contiguous inputs, an output buffer, a 1-D launch grid
    a = a.contiguous()
    b = b.contiguous()
    out = torch.empty_like(a)
    numel = out.numel()
    BLOCK = 1024
    grid = (triton.cdiv(numel, BLOCK),)
    add_kernel[grid](a, b, out, numel, BLOCK=BLOCK)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return add(a, b)

```

Here is the architecture to optimize:
```
{}
```

Rewrite the architecture named Model with custom Triton kernels and call the result ModelNew. Put the new code in code blocks. It must be real, complete code that runs, not pseudocode. Output only the new model code, without explanations, and NO testing code!
)TEMPLATE";

// Our own words. No other braces than the field.
constexpr std::string_view kBuiltinChatTemplate = R"TEMPLATE(Rewrite the PyTorch module below so that it runs faster, replacing some or all of its operators with custom Triton kernels (fuse operators where that helps).

Name the new module class ModelNew. Keep its constructor arguments, forward() inputs and outputs the same as Model's. Answer with one ```python code block holding the complete, runnable module: imports, the @triton.jit kernels, their wrappers and ModelNew. No tests, no explanations.

```python
{}
```
)TEMPLATE";

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t line_of(std::string_view src, size_t pos) {
  size_t line = 1;
  for (size_t i = 0; i < pos && i < src.size(); ++i) line += src[i] == '\n' ? 1 : 0;
  return line;
}

// When a string literal (optional prefix of up to two letters, then a quote) starts at
// `pos`, the length of its prefix; otherwise nullopt.
std::optional<size_t> literal_prefix_length(std::string_view src, size_t pos) {
  size_t n = 0;
  while (pos + n < src.size() && n < 3 && std::string_view("rRuUbBfF").find(src[pos + n]) != std::string_view::npos) {
    ++n;
  }
  if (n > 2 || pos + n >= src.size()) return std::nullopt;
  char q = src[pos + n];
  if (q != '"' && q != '\'') return std::nullopt;
  return n;
}

struct Literal {
  std::string value;
  size_t end = 0;              // one past the closing quote
  bool plain_string = true;    // false for bytes and f-strings
};

// Decodes one Python string literal starting at `pos` (its prefix or quote). Escapes follow
// https://docs.python.org/3/reference/lexical_analysis.html#escape-sequences.
Result<Literal> parse_literal(std::string_view src, size_t pos, std::string_view what) {
  auto prefix_len = literal_prefix_length(src, pos);
  if (!prefix_len) return error(ErrorCode::internal, "parse_literal called off a literal");
  Literal lit;
  bool raw = false;
  for (size_t k = 0; k < *prefix_len; ++k) {
    char c = src[pos + k];
    if (c == 'r' || c == 'R') raw = true;
    if (c == 'b' || c == 'B' || c == 'f' || c == 'F') lit.plain_string = false;
  }
  size_t i = pos + *prefix_len;
  const char quote = src[i];
  const bool triple = i + 2 < src.size() && src[i + 1] == quote && src[i + 2] == quote;
  i += triple ? 3 : 1;
  auto fail = [&](size_t at, std::string_view msg) {
    return error(ErrorCode::parse_error, fmt::format("{}:{}: {}", what, line_of(src, at), msg));
  };
  while (true) {
    if (i >= src.size()) return fail(pos, "unterminated string literal");
    char c = src[i];
    if (c == quote) {
      if (!triple) {
        lit.end = i + 1;
        return lit;
      }
      if (i + 2 < src.size() && src[i + 1] == quote && src[i + 2] == quote) {
        lit.end = i + 3;
        return lit;
      }
      lit.value += c;
      ++i;
      continue;
    }
    if (c == '\n' && !triple) return fail(pos, "expected the closing quote before the end of the line");
    if (c != '\\') {
      lit.value += c;
      ++i;
      continue;
    }
    if (i + 1 >= src.size()) return fail(pos, "unterminated string literal");
    char e = src[i + 1];
    if (raw) {  // a backslash only keeps the next character from ending the string
      lit.value += c;
      lit.value += e;
      i += 2;
      continue;
    }
    i += 2;
    switch (e) {
      case '\n': break;  // line continuation inside the literal
      case '\\': lit.value += '\\'; break;
      case '\'': lit.value += '\''; break;
      case '"': lit.value += '"'; break;
      case 'a': lit.value += '\a'; break;
      case 'b': lit.value += '\b'; break;
      case 'f': lit.value += '\f'; break;
      case 'n': lit.value += '\n'; break;
      case 'r': lit.value += '\r'; break;
      case 't': lit.value += '\t'; break;
      case 'v': lit.value += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          int h = i + k < src.size() ? hex_value(src[i + k]) : -1;
          if (h < 0) return fail(i, fmt::format("expected {} hex digits after \\{}", digits, e));
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        i += digits;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return fail(i, fmt::format("escape \\{} names U+{:X}, which is not a valid character", e, cp));
        }
        append_utf8(lit.value, cp);
        break;
      }
      case 'N':
        return fail(i, "\\N{...} named escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (size_t k = 0; k < 2 && i < src.size() && src[i] >= '0' && src[i] <= '7'; ++k, ++i) {
            cp = cp * 8 + static_cast<uint32_t>(src[i] - '0');
          }
          append_utf8(lit.value, cp);
        } else {  // unknown escapes keep their backslash
          lit.value += '\\';
          lit.value += e;
        }
    }
  }
}

// The value of an assignment's right-hand side starting at `pos` (just after '='):
// string literals only, adjacent ones concatenated.
Result<std::string> parse_rhs(std::string_view src, size_t pos, std::string_view what) {
  auto fail = [&](size_t at, std::string_view msg) {
    return error(ErrorCode::parse_error,
                 fmt::format("{}:{}: PROMPT_TEMPLATE: {}", what, line_of(src, at), msg));
  };
  size_t i = pos;
  bool parens = false;
  std::string value;
  int literals = 0;
  auto skip_space = [&] {
    while (i < src.size()) {
      char c = src[i];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++i;
      } else if (c == '\\' && i + 1 < src.size() && src[i + 1] == '\n') {
        i += 2;
      } else if (parens && (c == '\n' || c == '\r')) {
        ++i;
      } else if (parens && c == '#') {
        while (i < src.size() && src[i] != '\n') ++i;
      } else {
        break;
      }
    }
  };
  skip_space();
  if (i < src.size() && src[i] == '(') {
    parens = true;
    ++i;
  }
  while (true) {
    skip_space();
    if (i < src.size() && literal_prefix_length(src, i)) {
      KLLM_ASSIGN_OR_RETURN(Literal lit, parse_literal(src, i, what));
      if (!lit.plain_string) return fail(i, "expected plain string literals, found a bytes or f-string literal");
      value += lit.value;
      ++literals;
      i = lit.end;
      continue;
    }
    break;
  }
  if (parens) {
    if (i >= src.size() || src[i] != ')') return fail(i, "expected only string literals inside the parentheses");
    ++i;
    skip_space();
  }
  bool at_end = i >= src.size() || src[i] == '\n' || src[i] == '\r' || src[i] == '#' || src[i] == ';';
  if (literals == 0) return fail(i, "expected a string literal after '='");
  if (!at_end) {
    return fail(i, fmt::format("expected only string literals, found '{}' after them", src.substr(i, 1)));
  }
  return value;
}

}  // namespace

std::string_view builtin_prompt_template() { return kBuiltinTemplate; }

Result<std::string> extract_prompt_template(std::string_view raw_source, std::string_view what) {
  constexpr std::string_view kName = "PROMPT_TEMPLATE";
  // Python reads source with universal newlines: "\r\n" and "\r" are "\n", also inside literals.
  std::string normalized;
  normalized.reserve(raw_source.size());
  for (size_t k = 0; k < raw_source.size(); ++k) {
    if (raw_source[k] == '\r') {
      normalized += '\n';
      if (k + 1 < raw_source.size() && raw_source[k + 1] == '\n') ++k;
    } else {
      normalized += raw_source[k];
    }
  }
  const std::string_view src = normalized;
  std::optional<std::string> found;
  bool line_start = true;
  size_t i = 0;
  // Walks the source token-wise enough to skip strings and comments, so that text inside a
  // docstring is never mistaken for the assignment.
  while (i < src.size()) {
    char c = src[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (c == '#') {
      while (i < src.size() && src[i] != '\n') ++i;
      continue;
    }
    if (literal_prefix_length(src, i) && (i == 0 || !is_ident_char(src[i - 1]))) {
      KLLM_ASSIGN_OR_RETURN(Literal lit, parse_literal(src, i, what));
      i = lit.end;
      line_start = false;
      continue;
    }
    if (is_ident_char(c)) {
      size_t start = i;
      while (i < src.size() && is_ident_char(src[i])) ++i;
      if (line_start && src.substr(start, i - start) == kName) {
        size_t j = i;
        while (j < src.size() && (src[j] == ' ' || src[j] == '\t')) ++j;
        if (j < src.size() && src[j] == ':') {  // annotated: PROMPT_TEMPLATE: str = ...
          while (j < src.size() && src[j] != '=' && src[j] != '\n') ++j;
        }
        if (j < src.size() && src[j] == '=' && (j + 1 >= src.size() || src[j + 1] != '=')) {
          KLLM_ASSIGN_OR_RETURN(std::string value, parse_rhs(src, j + 1, what));
          found = std::move(value);
        } else if (j + 1 < src.size() && src[j + 1] == '=' && src[j] != '=') {
          return error(ErrorCode::parse_error,
                       fmt::format("{}:{}: PROMPT_TEMPLATE: expected a plain assignment '= \"...\"', found '{}='",
                                   what, line_of(src, start), src[j]));
        }
      }
      line_start = false;
      continue;
    }
    line_start = false;  // module-level assignments start in column 0
    ++i;
  }
  if (!found) {
    return error(ErrorCode::not_found,
                 fmt::format("{}: expected a top-level PROMPT_TEMPLATE = \"...\" assignment, found none", what));
  }
  return *std::move(found);
}

std::string_view builtin_chat_prompt_template() { return kBuiltinChatTemplate; }

Result<PromptTemplate> load_prompt_template(const std::filesystem::path& model_dir,
                                            const std::filesystem::path& override_file) {
  if (!override_file.empty()) {
    auto text = read_text_file(override_file);
    if (!text.ok()) return text.status().with_context("prompt template");
    return PromptTemplate{std::move(text).value(), override_file.string()};
  }
  if (!model_dir.empty()) {
    std::filesystem::path script = model_dir / "kernelllm.py";
    std::error_code ec;
    if (std::filesystem::is_regular_file(script, ec)) {
      KLLM_ASSIGN_OR_RETURN(std::string source, read_text_file(script));
      KLLM_ASSIGN_OR_RETURN(std::string text, extract_prompt_template(source, script.string()));
      return PromptTemplate{std::move(text), script.string()};
    }
  }
  return PromptTemplate{std::string(kBuiltinTemplate), "built-in"};
}

Result<std::string> format_triton_prompt(std::string_view tmpl, std::string_view code) {
  std::string out;
  out.reserve(tmpl.size() + code.size());
  int auto_fields = 0;
  int manual_fields = 0;
  auto fail = [](std::string msg) { return error(ErrorCode::invalid_argument, "prompt template: " + msg); };
  for (size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if (c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return fail(fmt::format("single '}}' at offset {} (write '}}}}' for a literal brace)", i));
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = tmpl.find_first_of("{}", i + 1);
    if (close == std::string_view::npos || tmpl[close] != '}') {
      return fail(fmt::format("single '{{' at offset {} (write '{{{{' for a literal brace)", i));
    }
    std::string_view field = tmpl.substr(i + 1, close - i - 1);
    if (field.empty()) {
      ++auto_fields;
    } else if (field == "0") {
      ++manual_fields;
    } else {
      return fail(fmt::format("expected the field '{{}}' or '{{0}}' for the module code, found '{{{}}}'", field));
    }
    if (auto_fields > 1) return fail("'{}' appears more than once; only one argument (the code) is given");
    if (auto_fields > 0 && manual_fields > 0) return fail("mixes '{}' and '{0}' fields");
    out += code;
    i = close;
  }
  if (auto_fields + manual_fields == 0) {
    return fail("expected a '{}' field for the module code, found none");
  }
  return out;
}

}  // namespace kernelllm
