// Extracting the ModelNew module from a completion: split the text into lines, find fenced
// blocks (a fence is a line whose first non-blank characters are ```), take the first block
// with a `class ModelNew` line, else the whole text without fence lines.
#include "kernelllm/pipeline/extract.h"

#include <vector>

namespace kernelllm {
namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::string_view trim_left(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

bool is_fence(std::string_view line) { return trim_left(line).starts_with("```"); }

bool is_model_new_line(std::string_view line) {
  if (!line.starts_with("class ModelNew")) return false;
  if (line.size() == 14) return true;
  const char next = line[14];
  return next == '(' || next == ':' || next == ' ' || next == '\t';
}

bool defines_model_new(const std::vector<std::string_view>& lines) {
  for (std::string_view l : lines) {
    if (is_model_new_line(l)) return true;
  }
  return false;
}

// Joins lines with '\n', dropping leading and trailing blank lines; ends with exactly one
// newline (empty when every line is blank).
std::string join_trimmed(const std::vector<std::string_view>& lines) {
  auto blank = [](std::string_view l) { return trim_left(l).empty(); };
  size_t first = 0;
  size_t last = lines.size();
  while (first < last && blank(lines[first])) ++first;
  while (last > first && blank(lines[last - 1])) --last;
  std::string out;
  for (size_t i = first; i < last; ++i) {
    out += lines[i];
    out += '\n';
  }
  return out;
}

}  // namespace

ExtractedCode extract_model_new(std::string_view completion) {
  const std::vector<std::string_view> lines = split_lines(completion);
  std::vector<std::string_view> outside;  // every non-fence line, for the whole-text fallback
  std::vector<std::string_view> block;
  bool in_block = false;
  int block_number = 0;
  for (std::string_view line : lines) {
    if (is_fence(line)) {
      if (in_block) {
        if (defines_model_new(block)) {
          return ExtractedCode{join_trimmed(block), "fenced block " + std::to_string(block_number), true};
        }
        block.clear();
        in_block = false;
      } else {
        in_block = true;
        ++block_number;
      }
      continue;
    }
    outside.push_back(line);
    if (in_block) block.push_back(line);
  }
  // An unterminated last block runs to the end of the text.
  if (in_block && defines_model_new(block)) {
    return ExtractedCode{join_trimmed(block), "fenced block " + std::to_string(block_number), true};
  }
  return ExtractedCode{join_trimmed(outside), "whole text", defines_model_new(outside)};
}

}  // namespace kernelllm
