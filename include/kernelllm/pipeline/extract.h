// Getting the candidate module out of a model completion: the first fenced code block that
// defines `class ModelNew`, else the whole text (the model sometimes writes bare code).
#pragma once

#include <string>
#include <string_view>

namespace kernelllm {

struct ExtractedCode {
  std::string code;        // what gets written to the candidate file: LF line ends, outer blank lines
                           // dropped, ends with one newline (empty when there is no text at all)
  std::string how;         // "fenced block N" (1-based, counting all fenced blocks) or "whole text"
  bool defines_model_new;  // whether `code` has a line starting with `class ModelNew`
};

// Fences are lines starting with ``` (any info string such as ```python); an unterminated
// last block runs to the end of the text (generation stopped at max_new_tokens). With no
// block defining ModelNew the whole text is used, stripped of fence lines.
ExtractedCode extract_model_new(std::string_view completion);

}  // namespace kernelllm
