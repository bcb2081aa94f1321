// Result-cache entries read back: every member type-checked (an entry is data another run, or an
// older verifier, wrote) and turned into a candidate's result. The cache itself: cache.cpp.
#include <string>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {

namespace {

constexpr JsonMember kCacheMembers[] = {{"verdict", kJsonString},
                                        {"rule", kJsonString},
                                        {"message", kJsonString},
                                        {"stderr_tail", kJsonString},
                                        {"multishape_note", kJsonString},
                                        {"timing", kJsonObject | kJsonNull},
                                        {"speedup", kJsonNumber | kJsonNull},
                                        {"multishape", kJsonObject | kJsonNull}};
constexpr JsonMember kCacheTimingMembers[] = {{"meaningful", kJsonBool},
                                              {"times_ms", kJsonArray, kJsonNumber},
                                              {"event_total_ms", kJsonNumber},
                                              {"wall_total_ms", kJsonNumber},
                                              {"orchestrator_wall_ms", kJsonNumber}};
constexpr JsonMember kCacheMultishapeMembers[] = {{"verdict", kJsonString}, {"variants", kJsonArray, kJsonObject}};
constexpr JsonMember kCacheVariantMembers[] = {
    {"name", kJsonString}, {"verdict", kJsonString}, {"message", kJsonString}, {"sizes", kJsonObject}};

}  // namespace

std::string cache_entry_error(const Json& j) {
  std::string e = json_members_error(j, kCacheMembers);
  if (e.empty() && !verdict_from_name(j.value("verdict", ""))) e = "no known verdict";
  if (e.empty() && j.contains("timing") && j["timing"].is_object()) {
    e = json_members_error(j["timing"], kCacheTimingMembers, "timing ");
  }
  if (e.empty() && j.contains("multishape") && j["multishape"].is_object()) {
    const Json& m = j["multishape"];
    e = json_members_error(m, kCacheMultishapeMembers, "multishape ");
    for (size_t v = 0; e.empty() && m.contains("variants") && v < m["variants"].size(); ++v) {
      e = json_members_error(m["variants"][v], kCacheVariantMembers, fmt::format("multishape variant {} ", v));
    }
  }
  return e;
}

void result_from_cache(const Json& j, CandidateResult& r) {
  r.verdict = verdict_from_name(j.value("verdict", "")).value_or(Verdict::not_verified);
  r.rule = j.value("rule", "");
  r.message = j.value("message", "");
  r.stderr_tail = j.value("stderr_tail", "");
  r.stats = j.value("stats", Json());
  r.evidence = j.value("evidence", Json());
  r.cached = true;
  if (j.contains("multishape")) r.multishape = multishape_from_json(j["multishape"]);
  r.multishape_note = j.value("multishape_note", "");
  if (j.contains("timing") && j["timing"].is_object()) {
    const Json& t = j["timing"];
    TimingResult tr;
    tr.meaningful = t.value("meaningful", false);
    tr.times_ms = t.value("times_ms", std::vector<double>{});
    tr.stats = timing_stats(tr.times_ms);
    tr.event_total_ms = t.value("event_total_ms", 0.0);
    tr.wall_total_ms = t.value("wall_total_ms", 0.0);
    tr.orchestrator_wall_ms = t.value("orchestrator_wall_ms", 0.0);
    tr.ping_ms = t.value("ping_ms", 0.0);
    tr.flush_excess_ms = t.value("flush_excess_ms", 0.0);
    if (t.contains("check_excess_ms") && t["check_excess_ms"].is_number()) tr.check_excess_ms = t["check_excess_ms"].get<double>();
    tr.load_excess_ms = t.value("load_excess_ms", 0.0);
    tr.calls_per_trip = t.value("calls_per_trip", 1);
    if (t.contains("warmup_trips") && t["warmup_trips"].is_number_integer()) tr.warmup_trips = t["warmup_trips"].get<int>();
    // Written by newer versions only: read when they have their type, else left empty.
    auto numbers = [&](const char* key) {
      std::vector<double> v;
      if (!t.contains(key) || !t[key].is_array()) return v;
      for (const Json& x : t[key]) {
        if (!x.is_number()) return std::vector<double>{};
        v.push_back(x.get<double>());
      }
      return v;
    };
    tr.paired_ref_ms = numbers("paired_reference_ms");
    tr.paired_load_ms = numbers("paired_load_ms");
    if (t.contains("inputs") && t["inputs"].is_string()) tr.inputs = t["inputs"].get<std::string>();
    if (t.contains("paused_between_round_trips") && t["paused_between_round_trips"].is_boolean()) {
      tr.paused = t["paused_between_round_trips"].get<bool>();
    }
    if (t.contains("flush_repeats") && t["flush_repeats"].is_number_integer()) tr.flush_repeats = t["flush_repeats"].get<int>();
    if (t.contains("cpu") && t["cpu"].is_number_integer()) tr.cpu = t["cpu"].get<int>();
    if (t.contains("cpu_note") && t["cpu_note"].is_string()) tr.cpu_note = t["cpu_note"].get<std::string>();
    r.timing = tr;
    r.speedup = j.value("speedup", Json(nullptr)).is_number() ? j["speedup"].get<double>() : 0.0;
  }
}

}  // namespace kernelllm::harness
