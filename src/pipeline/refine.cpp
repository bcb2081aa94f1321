// Verdicts in words for the optimize loop: refinement prompts (our own short wording), one-line
// failure reasons and progress lines. Long messages are cut; newlines become spaces in one-liners.
#include "pipeline/refine.h"

#include <string_view>

#include <fmt/format.h>

namespace kernelllm::pipeline {
namespace {

std::string one_line(std::string_view text, size_t max_chars) {
  std::string out;
  bool space = false;
  for (char ch : text) {
    if (ch == '\n' || ch == '\r' || ch == '\t' || ch == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += ch;
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

// The last `max_chars` of `text`, starting at a line boundary when there is one.
std::string tail(std::string_view text, size_t max_chars) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() <= max_chars) return std::string(text);
  std::string_view t = text.substr(text.size() - max_chars);
  if (size_t nl = t.find('\n'); nl != std::string_view::npos && nl + 1 < t.size()) t = t.substr(nl + 1);
  return std::string(t);
}

// "max_abs=0.41 max_rel=2.3 ..." from the judge's numeric statistics (object or list of objects).
std::string stats_summary(const Json& stats) {
  const Json* s = &stats;
  if (s->is_array() && !s->empty()) s = &(*s)[0];
  if (!s->is_object()) return "";
  std::string out;
  int shown = 0;
  for (const auto& [key, value] : s->items()) {
    if (!value.is_number() || shown == 8) continue;
    out += fmt::format("{}{}={:.4g}", out.empty() ? "" : " ", key, value.get<double>());
    ++shown;
  }
  return out;
}

// The rule, unless it only repeats the verdict's name (the verifier's error kinds do).
std::string rule_of(const harness::CandidateResult& r) {
  return r.rule == harness::verdict_name(r.verdict) ? std::string() : r.rule;
}

std::string where(const OptimizeCandidate& c, bool with_round) {
  return with_round ? fmt::format("round {} sample {}", c.round, c.sample) : fmt::format("sample {}", c.sample);
}

}  // namespace

std::string refinement_prompt(const std::string& prompt, const OptimizeCandidate& c) {
  const harness::CandidateResult& r = c.result;
  std::string out = prompt;
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += "\nA previous attempt at ModelNew:\n```python\n";
  out += c.code.empty() ? std::string("# (no code)\n") : c.code;
  out += "```\n";
  out += fmt::format("It failed verification against Model: {}", harness::verdict_name(r.verdict));
  if (std::string rule = rule_of(r); !rule.empty()) out += fmt::format(" (rule {})", rule);
  if (!r.message.empty()) out += ": " + one_line(r.message, 1200);
  out += "\n";
  if (std::string s = stats_summary(r.stats); !s.empty()) out += "Error statistics: " + s + "\n";
  if (!c.defines_model_new) out += "The code does not define class ModelNew.\n";
  if (!r.stderr_tail.empty()) out += "End of its stderr:\n```\n" + tail(r.stderr_tail, 1500) + "\n```\n";
  out += "\nFix the problem. Write the complete corrected ModelNew with its Triton kernels in code blocks, "
         "without explanations and without testing code.\n";
  return out;
}

std::string failure_reason(const OptimizeCandidate& c, bool with_round) {
  const harness::CandidateResult& r = c.result;
  std::string line = where(c, with_round) + ": " + std::string(harness::verdict_name(r.verdict));
  if (std::string rule = rule_of(r); !rule.empty()) line += " [" + rule + "]";
  std::string why = r.message;
  if (std::string s = stats_summary(r.stats); !s.empty() && r.verdict == harness::Verdict::wrong_output) {
    why += (why.empty() ? "" : "; ") + s;
  }
  if (why.empty() && !c.defines_model_new) why = "the completion defines no class ModelNew";
  if (why.empty() && !r.stderr_tail.empty()) why = tail(r.stderr_tail, 300);
  if (!why.empty()) line += ": " + one_line(why, 400);
  return line;
}

std::string verdict_line(const OptimizeCandidate& c, bool with_round) {
  const harness::CandidateResult& r = c.result;
  std::string line = where(c, with_round) + ": " + std::string(harness::verdict_name(r.verdict));
  if (r.verdict == harness::Verdict::correct) {
    if (r.speedup > 0) line += fmt::format(" ({:.2f}x)", r.speedup);
    return line;
  }
  const std::string rule = rule_of(r);
  std::string why = rule.empty() ? r.message : rule + ": " + r.message;
  if (!why.empty()) line += " (" + one_line(why, 160) + ")";
  return line;
}

}  // namespace kernelllm::pipeline
