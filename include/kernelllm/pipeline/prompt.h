// The Triton-generation prompt: where its template comes from (an override file, the
// PROMPT_TEMPLATE string in the model directory's kernelllm.py, or our built-in template of
// the same shape) and how the user's module is put into it (Python str.format semantics).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kernelllm/base/status.h"

namespace kernelllm {

// Our own raw-completion template: a leading newline and the literal <|begin_of_text|>, the
// task, one example (an a + b module and its Triton version), the user's module as the one
// replacement field "{}", and the request for ModelNew in code blocks without testing code.
std::string_view builtin_prompt_template();

// Our template for instruction (chat) models behind an endpoint (`--endpoint-prompt chat`): a
// short instruction, then the module in a python code block as the one "{}" field. The reply's
// code is taken out by extract_model_new like any completion.
std::string_view builtin_chat_prompt_template();

// The value of the top-level `PROMPT_TEMPLATE = ...` assignment in Python source: one string
// literal or adjacent literals (implicit concatenation, optionally parenthesized), with
// r/u prefixes, single or triple quotes and Python's escape sequences. The last top-level
// assignment wins, as in Python. `what` names the source in errors. Not found → not_found;
// an assignment that is not plain string literals (f-strings, bytes, calls, `+`) → parse_error.
Result<std::string> extract_prompt_template(std::string_view python_source, std::string_view what);

struct PromptTemplate {
  std::string text;
  std::string source;  // the file it came from, or "built-in"
};

// `override_file` (raw template text) when non-empty; else PROMPT_TEMPLATE from
// `model_dir`/kernelllm.py when that file exists (an error if it has none or it does not
// parse); else the built-in template. `model_dir` may be empty.
Result<PromptTemplate> load_prompt_template(const std::filesystem::path& model_dir,
                                            const std::filesystem::path& override_file = {});

// What Python's `template.format(code)` gives: "{{" and "}}" are literal braces, "{}" and
// "{0}" become `code` verbatim. Any other field (named, index > 0, conversions, format
// specs), an unmatched brace, or a template with no field at all is an invalid_argument error.
Result<std::string> format_triton_prompt(std::string_view template_text, std::string_view code);

}  // namespace kernelllm
