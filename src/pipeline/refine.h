// Pieces of the optimize loop that turn verdicts into words: the refinement prompt that feeds a
// failed candidate back to the model, the one-line failure reason, and the progress line.
// Private to src/pipeline.
#pragma once

#include <string>

#include "kernelllm/pipeline/optimize.h"

namespace kernelllm::pipeline {

// The original prompt, then the candidate's code and how it failed (verdict, rule, message,
// error statistics, the end of its stderr), then the request for a corrected ModelNew.
std::string refinement_prompt(const std::string& prompt, const OptimizeCandidate& candidate);

// "round 2 sample 3: wrong_output: trial 0 (normal): max abs err 0.41 ..." (one line).
std::string failure_reason(const OptimizeCandidate& candidate, bool with_round);

// "sample 3: correct (1.42x)" / "sample 3: compile_error (SyntaxError: ...)" for progress.
std::string verdict_line(const OptimizeCandidate& candidate, bool with_round);

}  // namespace kernelllm::pipeline
