// The readable table `kernelllm bench` prints from run_bench's JSON (bench.h): one line of
// context, the prefill, the copy bandwidth, then one row per n with the peer's beside ours.
#include <fmt/format.h>

#include "kernelllm/engine/bench.h"

namespace kernelllm {

namespace {

double num(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : -1.0;
}

std::string cell(double v, const char* spec) { return v < 0 ? std::string("-") : fmt::format(fmt::runtime(spec), v); }

// The peer's entry for `n`, or null.
const Json* peer_entry(const Json& result, int64_t n) {
  const auto peer = result.find("peer");
  if (peer == result.end() || !peer->contains("decode")) return nullptr;
  for (const Json& e : (*peer)["decode"]) {
    if (e.value("n", int64_t{-1}) == n) return &e;
  }
  return nullptr;
}

}  // namespace

std::string format_bench_table(const Json& r) {
  std::string out;
  const Json& opt = r["options"];
  const Json& gpu = r["machine"]["gpu"];
  const std::string device = opt.value("device", std::string("?")) +
                             (gpu.is_object() && gpu.contains("name") ? " (" + gpu["name"].get<std::string>() + ")" : "");
  out += fmt::format("kernelllm bench: {} on {}, {}, prompt {} tokens, {} new tokens\n",
                     r["model"].value("source", std::string("?")), device, opt.value("dtype", std::string("?")),
                     opt.value("prompt_tokens", int64_t{0}), opt.value("new_tokens", int64_t{0}));
  const double temperature = opt.value("temperature", 0.0);
  out += temperature > 0 ? fmt::format("draws: sampled, temperature {:g}, top_p {:g}, top_k {}\n", temperature,
                                       opt.value("top_p", 1.0), opt.value("top_k", int64_t{0}))
                         : std::string("draws: greedy\n");
  if (const Json& env = r["machine"].value("environment", Json::object()); !env.empty()) {
    std::string vars;
    for (const auto& [k, v] : env.items()) vars += (vars.empty() ? "" : " ") + k + "=" + v.get<std::string>();
    out += "environment: " + vars + "\n";
  }
  const Json& pf = r["prefill"];
  out += fmt::format("prefill: {} ms median ({} tok/s)\n", cell(num(pf, "ms_median"), "{:.2f}"), cell(num(pf, "tok_s"), "{:.0f}"));
  const Json& bw = r["copy_bandwidth"];
  out += bw.value("available", false) ? fmt::format("device copy bandwidth: {:.0f} GB/s\n", bw["gbps"].get<double>())
                                      : "device copy bandwidth: unavailable (" + bw.value("reason", std::string()) + ")\n";
  const bool peer = r.contains("peer");
  if (peer && r["peer"].contains("error")) out += "HF peer: failed: " + r["peer"]["error"].get<std::string>() + "\n";
  if (peer && r["peer"].contains("prefill_ms")) {
    out += fmt::format("HF peer prefill: {} ms\n", cell(num(r["peer"], "prefill_ms"), "{:.2f}"));
  }
  out += fmt::format("{:>4} {:>10} {:>10} {:>10} {:>11} {:>8} {:>7}", "n", "ms/step", "p10-p90", "tok/s/seq", "tok/s total",
                     "GB/s", "% copy");
  out += peer ? fmt::format(" | {:>12} {:>11}\n", "HF tok/s/seq", "HF total") : "\n";
  for (const Json& e : r["decode"]) {
    const int64_t n = e.value("n", int64_t{0});
    out += fmt::format("{:>4} {:>10} {:>10} {:>10} {:>11} {:>8} {:>7}", n, cell(num(e, "ms_per_step_median"), "{:.2f}"),
                       cell(num(e, "ms_per_step_p90") - num(e, "ms_per_step_p10"), "±{:.2f}"),
                       cell(num(e, "tok_s_per_seq"), "{:.1f}"), cell(num(e, "tok_s_aggregate"), "{:.1f}"),
                       cell(num(e, "achieved_gbps"), "{:.1f}"), cell(num(e, "pct_of_copy_bandwidth"), "{:.1f}"));
    if (peer) {
      const Json* p = peer_entry(r, n);
      out += p == nullptr ? fmt::format(" | {:>12} {:>11}\n", "-", "-")
                          : fmt::format(" | {:>12} {:>11}\n", cell(num(*p, "tok_s_per_seq"), "{:.1f}"),
                                        cell(num(*p, "tok_s_aggregate"), "{:.1f}"));
    } else {
      out += "\n";
    }
  }
  return out;
}

}  // namespace kernelllm
