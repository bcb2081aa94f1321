// The eval report as JSON: outcomes to and from JSON, build_report (deterministic: nlohmann's
// objects keep keys sorted, numbers print shortest-round-trip, nothing time-dependent is added)
// and write_reports (report.json and report.html, each written to a temporary name then renamed).
#include <fstream>
#include <set>
#include <system_error>

#include "kernelllm/eval/report.h"

namespace kernelllm::eval {
namespace {

Status write_file_atomically(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return error(ErrorCode::io_error, "cannot open " + tmp.string() + " for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return error(ErrorCode::io_error, "cannot write " + std::to_string(bytes.size()) + " bytes to " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return error(ErrorCode::io_error, "cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return {};
}

}  // namespace

Json SampleOutcome::to_json() const {
  Json j{{"sample", sample},
          {"candidate_file", candidate_file},
          {"verdict", verdict},
          {"rule", rule},
          {"message", message},
          {"correct", correct},
          {"speedup", speedup ? Json(*speedup) : Json(nullptr)},
          {"candidate_ms", candidate_ms ? Json(*candidate_ms) : Json(nullptr)},
          {"reference_ms", reference_ms ? Json(*reference_ms) : Json(nullptr)}};
  if (multishape) j["multishape"] = *multishape;  // absent without the check: reports of runs without it unchanged
  return j;
}

Result<SampleOutcome> SampleOutcome::from_json(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object, found " + std::string(json_type_name(j)));
  }
  SampleOutcome s;
  KLLM_ASSIGN_OR_RETURN(int64_t sample, json_int(j, "sample", what));
  s.sample = static_cast<int>(sample);
  KLLM_ASSIGN_OR_RETURN(s.candidate_file, json_string(j, "candidate_file", what));
  KLLM_ASSIGN_OR_RETURN(s.verdict, json_string(j, "verdict", what));
  KLLM_ASSIGN_OR_RETURN(auto rule, json_opt_string(j, "rule", what));
  KLLM_ASSIGN_OR_RETURN(auto message, json_opt_string(j, "message", what));
  s.rule = rule.value_or("");
  s.message = message.value_or("");
  KLLM_ASSIGN_OR_RETURN(s.correct, json_bool(j, "correct", what));
  KLLM_ASSIGN_OR_RETURN(s.speedup, json_opt_number(j, "speedup", what));
  KLLM_ASSIGN_OR_RETURN(s.candidate_ms, json_opt_number(j, "candidate_ms", what));
  KLLM_ASSIGN_OR_RETURN(s.reference_ms, json_opt_number(j, "reference_ms", what));
  KLLM_ASSIGN_OR_RETURN(s.multishape, json_opt_string(j, "multishape", what));
  if (s.multishape && *s.multishape != "pass" && *s.multishape != "fail") {
    return error(ErrorCode::parse_error, std::string(what) + ": expected multishape \"pass\" or \"fail\", found \"" +
                                             *s.multishape + "\"");
  }
  return s;
}

Json ProblemOutcome::to_json() const {
  Json by_profile = Json::object();
  for (const auto& [profile, list] : samples) {
    Json arr = Json::array();
    for (const SampleOutcome& s : list) arr.push_back(s.to_json());
    by_profile[profile] = std::move(arr);
  }
  return {{"id", id}, {"level", level}, {"problem_file", problem_file}, {"samples", std::move(by_profile)}};
}

Result<ProblemOutcome> ProblemOutcome::from_json(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object, found " + std::string(json_type_name(j)));
  }
  ProblemOutcome p;
  KLLM_ASSIGN_OR_RETURN(p.id, json_string(j, "id", what));
  KLLM_ASSIGN_OR_RETURN(int64_t level, json_int(j, "level", what));
  p.level = static_cast<int>(level);
  KLLM_ASSIGN_OR_RETURN(p.problem_file, json_string(j, "problem_file", what));
  auto samples = j.find("samples");
  if (samples == j.end() || !samples->is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object samples");
  }
  for (const auto& [profile, list] : samples->items()) {
    if (!list.is_array()) {
      return error(ErrorCode::parse_error, std::string(what) + ": expected array samples." + profile + ", found " +
                                               std::string(json_type_name(list)));
    }
    std::vector<SampleOutcome>& out = p.samples[profile];
    for (size_t i = 0; i < list.size(); ++i) {
      KLLM_ASSIGN_OR_RETURN(SampleOutcome s, SampleOutcome::from_json(list[i], std::string(what) + ".samples." + profile +
                                                                                   "[" + std::to_string(i) + "]"));
      out.push_back(std::move(s));
    }
  }
  return p;
}

Result<Json> build_report(const ReportInput& input) {
  if (input.profiles.empty()) return error(ErrorCode::invalid_argument, "report: expected at least one profile, found none");
  std::set<std::string> seen;
  Json profiles = Json::object();
  for (const std::string& profile : input.profiles) {
    if (!seen.insert(profile).second) {
      return error(ErrorCode::invalid_argument, "report: profile " + profile + " is listed twice");
    }
    auto metrics = compute_metrics(input.outcomes, profile, input.metrics);
    if (!metrics.ok()) return metrics.status().with_context("report");
    profiles[profile] = metrics->to_json();
  }
  Json problems = Json::array();
  for (const ProblemOutcome& outcome : input.outcomes) {
    // Only the reported profiles: every sample list in the document has its metrics beside it.
    ProblemOutcome kept = outcome;
    std::erase_if(kept.samples, [&](const auto& entry) { return seen.count(entry.first) == 0; });
    problems.push_back(kept.to_json());
  }
  Json run = input.run.is_null() ? Json::object() : input.run;
  return Json{{"run", std::move(run)}, {"profiles", std::move(profiles)}, {"problems", std::move(problems)}};
}

Status write_reports(const Json& report, const std::filesystem::path& run_dir, const std::filesystem::path& out_dir) {
  KLLM_ASSIGN_OR_RETURN(std::string html, render_html(report, run_dir));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return error(ErrorCode::io_error, "cannot create report directory " + out_dir.string() + ": " + ec.message());
  KLLM_RETURN_IF_ERROR(write_file_atomically(out_dir / "report.json", report.dump(1) + "\n"));
  KLLM_RETURN_IF_ERROR(write_file_atomically(out_dir / "report.html", html));
  return {};
}

}  // namespace kernelllm::eval
