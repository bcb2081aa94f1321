// The outcome data of an eval run that metrics and reports are computed from: per problem, per
// verifier profile, one entry per sample. Filled from the run store; plain values only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"

namespace kernelllm::eval {

struct SampleOutcome {
  int sample = 0;                 // index within its problem (0..n-1)
  std::string candidate_file;     // path relative to the run directory
  std::string verdict;            // harness::verdict_name()
  std::string rule;               // cheat rule or error kind; may be empty
  std::string message;            // one-line reason; may be empty
  bool correct = false;           // verdict == correct
  std::optional<double> speedup;  // reference median / candidate median; only with meaningful timing
  std::optional<double> candidate_ms;  // the candidate's median time (ms) behind `speedup`
  std::optional<double> reference_ms;  // the reference's median time (ms): speedup × candidate_ms
  std::optional<std::string> multishape;  // "pass" or "fail": the multi-shape check (eval --multishape)

  // {"sample", "candidate_file", "verdict", "rule", "message", "correct", "speedup", "candidate_ms",
  // "reference_ms" (each null when absent)}, and "multishape" when the sample has one.
  Json to_json() const;
  // The inverse of to_json; `what` names the source in errors.
  static Result<SampleOutcome> from_json(const Json& j, std::string_view what);
};

struct ProblemOutcome {
  std::string id;            // "level1/19_ReLU" for a KernelBench root, else the file stem
  int level = 0;             // 0 for a plain problem directory
  std::string problem_file;  // as given on the command line (absolute)
  // profile name ("strict", "kernelbench") → samples ordered by index.
  std::map<std::string, std::vector<SampleOutcome>> samples;

  // {"id", "level", "problem_file", "samples": {profile: [SampleOutcome...]}} and its inverse.
  Json to_json() const;
  static Result<ProblemOutcome> from_json(const Json& j, std::string_view what);
};

}  // namespace kernelllm::eval
