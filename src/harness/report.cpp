// Verdict names, result/report JSON, device parsing and the bandwidth table for the roofline floor.
#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "kernelllm/base/device.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {

namespace {
constexpr std::array<std::pair<Verdict, std::string_view>, 12> kVerdictNames = {{
    {Verdict::correct, "correct"},
    {Verdict::wrong_output, "wrong_output"},
    {Verdict::wrong_shape, "wrong_shape"},
    {Verdict::compile_error, "compile_error"},
    {Verdict::runtime_error, "runtime_error"},
    {Verdict::crash, "crash"},
    {Verdict::timeout, "timeout"},
    {Verdict::cheat, "cheat"},
    {Verdict::sandbox_violation, "sandbox_violation"},
    {Verdict::undiscriminating, "undiscriminating"},
    {Verdict::environment_error, "environment_error"},
    {Verdict::not_verified, "not_verified"},
}};

Json timing_json(const TimingResult& t) {
  Json j{{"meaningful", t.meaningful},
              {"median_ms", t.stats.median_ms},
              {"q1_ms", t.stats.q1_ms},
              {"q3_ms", t.stats.q3_ms},
              {"iqr_ms", t.stats.iqr_ms()},
              {"min_ms", t.stats.min_ms},
              {"n", t.stats.n},
              {"times_ms", t.times_ms},
              {"event_total_ms", t.event_total_ms},
              {"wall_total_ms", t.wall_total_ms},
              {"orchestrator_wall_ms", t.orchestrator_wall_ms},
              {"ping_ms", t.ping_ms},
              {"flush_excess_ms", t.flush_excess_ms},
              {"check_excess_ms", t.check_excess_ms},
              {"load_excess_ms", t.load_excess_ms},
              {"calls_per_trip", t.calls_per_trip},
              {"warmup_trips", t.warmup_trips},
              {"load_ms", t.load_ms},
              {"cpu", t.cpu >= 0 ? Json(t.cpu) : Json(nullptr)},
              {"clock", "orchestrator"}};
  if (!t.cpu_note.empty()) j["cpu_note"] = t.cpu_note;
  if (!t.trip_steps_ms.empty()) j["trip_steps_ms"] = t.trip_steps_ms;
  if (!t.paired_with.empty()) j["paired_with"] = t.paired_with;
  if (t.flush_baseline_ms > 0) {
    j["flush_median_ms"] = t.flush_median_ms;
    j["flush_floor_ms"] = t.flush_floor_ms;
    j["flush_baseline_ms"] = t.flush_baseline_ms;
  }
  if (!t.paired_ref_ms.empty()) {
    // The reference's round trips beside this batch's, and the speedup's spread over them.
    const TimingStats s = timing_stats(paired_speedups(t));
    j["paired_reference_ms"] = t.paired_ref_ms;
    // How much of the published time is the clocked check beyond the reference's (near 1 on a
    // fast kernel: its time is mostly that, not its calls; docs/verification.md, Timing).
    double charged = 0;
    for (const double x : t.times_ms) charged += x * t.calls_per_trip;
    if (charged > 0) j["check_excess_share"] = std::min(1.0, t.check_excess_ms / charged);
    j["paired_reference_median_ms"] = timing_stats(t.paired_ref_ms).median_ms;
    j["paired_load_ms"] = t.paired_load_ms;
    j["inputs"] = t.inputs;
    j["paused_between_round_trips"] = t.paused;
    j["flush_repeats"] = t.flush_repeats;
    j["speedup_median"] = s.median_ms;
    j["speedup_q1"] = s.q1_ms;
    j["speedup_q3"] = s.q3_ms;
  }
  return j;
}
}  // namespace

std::string_view verdict_name(Verdict v) {
  for (const auto& [k, n] : kVerdictNames) {
    if (k == v) return n;
  }
  return "unknown";
}

std::optional<Verdict> verdict_from_name(std::string_view name) {
  for (const auto& [k, n] : kVerdictNames) {
    if (n == name) return k;
  }
  return std::nullopt;
}

Json CandidateResult::to_json() const {
  Json j{{"path", path},       {"device", device},   {"verdict", verdict_name(verdict)},
         {"rule", rule},       {"message", message}, {"stderr_tail", stderr_tail},
         {"stats", stats},     {"evidence", evidence}, {"cached", cached}};
  if (timing) {
    j["timing"] = timing_json(*timing);
    j["speedup"] = speedup > 0 ? Json(speedup) : Json(nullptr);
  } else {
    j["timing"] = nullptr;
    j["speedup"] = nullptr;
  }
  j["multishape"] = multishape ? multishape->to_json() : Json(nullptr);
  j["multishape_note"] = multishape_note;
  return j;
}

Json VerifyReport::to_json() const {
  Json cands = Json::array();
  for (const CandidateResult& c : candidates) cands.push_back(c.to_json());
  Json j{{"verifier", kVerifierVersion}, {"problem", problem},         {"profile", profile},
         {"sandbox", sandbox},           {"worker_start", worker_start}, {"warnings", warnings},
         {"environment", environment},
         {"candidates", cands},          {"selection_reason", selection_reason}};
  j["reference_timing"] = reference_timing ? timing_json(*reference_timing) : Json(nullptr);
  j["compile_timing"] = compile_timing ? timing_json(*compile_timing) : Json(nullptr);
  j["selected"] = selected ? Json(*selected) : Json(nullptr);
  j["selected_path"] = selected ? Json(candidates[*selected].path) : Json(nullptr);
  j["timeline_ms"] = timeline_ms;
  j["gpu_use"] = gpu_use;
  j["judge_ms"] = judge_ms;
  j["judges_started"] = judges_started;
  j["judges_reused"] = judges_reused;
  return j;
}

Result<std::vector<std::string>> parse_devices(std::string_view spec) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    std::string d(spec.substr(start, end - start));
    start = end + 1;
    if (d.empty()) continue;
    KLLM_RETURN_IF_ERROR(parse_device(d).status());
    out.push_back(d);
  }
  if (out.empty()) return error(ErrorCode::invalid_argument, "device: expected cpu, cuda or cuda:N, found nothing");
  bool has_cpu = false, has_cuda = false;
  for (const std::string& d : out) (d == "cpu" ? has_cpu : has_cuda) = true;
  if (has_cpu && has_cuda) return error(ErrorCode::invalid_argument, "device: cpu cannot be mixed with cuda devices");
  return out;
}

double peak_bandwidth_for(std::string_view name) {
  // Vendor peak DRAM bandwidth (GB/s). The floor only has to be below any honest time, so an
  // unknown GPU gets a bound above every current part.
  struct Known { std::string_view key; double gbs; };
  constexpr Known kKnown[] = {{"H200", 4800}, {"H100 NVL", 3900}, {"H100 PCIe", 2000}, {"H100", 3350}, {"GH200", 4900},
                              {"B200", 8000}, {"A100-SXM4-80GB", 2039}, {"A100 80GB", 1935}, {"A100", 1555},
                              {"L40S", 864}, {"L4", 300}, {"A10", 600}, {"V100", 900}, {"RTX 4090", 1008}};
  for (const Known& k : kKnown) {
    if (name.find(k.key) != std::string_view::npos) return k.gbs;
  }
  return 10000;
}

}  // namespace kernelllm::harness
