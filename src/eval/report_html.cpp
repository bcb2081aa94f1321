// The HTML eval report: one self-contained page (inline CSS and SVG, no scripts) made from the
// JSON of build_report. Every string from the run (ids, verdicts, messages, candidate code) is
// escaped; charts are in report_charts.cpp.
#include <algorithm>
#include <cstdio>

#include "kernelllm/base/file.h"
#include "kernelllm/eval/report.h"
#include "report_charts.h"

namespace kernelllm::eval {
namespace {

constexpr size_t kMaxEmbeddedCodeBytes = size_t{4} << 20;
constexpr const char* kDash = "\xE2\x80\x94";

constexpr const char* kStyle = R"css(
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bg:#ffffff; --soft:#f4f6fa; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg); background:var(--bg); }
main { max-width:1120px; margin:0 auto; padding:20px 28px 60px; }
h1 { font-size:24px; margin:8px 0 12px; }
h2 { font-size:19px; margin:32px 0 10px; padding-bottom:4px; border-bottom:2px solid var(--line); }
h3 { font-size:15px; margin:20px 0 8px; }
a { color:#1f5fbf; text-decoration:none; } a:hover { text-decoration:underline; }
nav { margin:8px 0 4px; color:var(--muted); } nav a { margin-right:14px; }
table { border-collapse:collapse; margin:6px 0 12px; }
th, td { border:1px solid var(--line); padding:4px 8px; text-align:left; vertical-align:top; }
th { background:var(--soft); font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
table.facts td:first-child { color:var(--muted); white-space:nowrap; }
table.facts td { overflow-wrap:anywhere; }
table.wide { width:100%; }
.cards { display:flex; flex-wrap:wrap; gap:10px; margin:10px 0; }
.card { border:1px solid var(--line); border-radius:6px; padding:8px 14px; min-width:120px; background:var(--soft); }
.card .v { font-size:20px; font-weight:600; font-variant-numeric:tabular-nums; }
.card .k { color:var(--muted); font-size:12px; }
.note { color:var(--muted); font-style:italic; margin:8px 0; }
svg.chart { width:100%; max-width:720px; height:auto; display:block; margin:6px 0 14px; }
svg.chart text { font:12px system-ui, sans-serif; fill:#333; }
svg.chart text.label { font-size:13px; fill:#222; }
svg.chart text.legend { font-size:13px; }
svg.chart text.count { font-size:11px; fill:#444; }
svg.chart text.markerlabel { font-size:12px; fill:#222; }
svg.chart line.grid { stroke:#e6e9ef; }
svg.chart line.axisline { stroke:#6b7280; }
svg.chart line.marker { stroke:#222; stroke-width:1.5; stroke-dasharray:5 4; }
.badge { display:inline-block; padding:0 6px; border-radius:4px; font-size:12px; line-height:18px; margin:1px 3px 1px 0; white-space:nowrap; background:#e5e7eb; color:#333; }
.v-correct { background:#d5f0d8; color:#165c24; }
.v-wrong_output, .v-wrong_shape { background:#fde7c7; color:#7a4306; }
.v-compile_error, .v-runtime_error, .v-crash, .v-timeout { background:#fbd5d5; color:#8a1c1c; }
.v-cheat, .v-sandbox_violation, .v-undiscriminating { background:#e9dcfb; color:#4c1d95; }
.msg { color:var(--muted); font-size:12px; overflow-wrap:anywhere; }
.problem { border-top:1px solid var(--line); padding-top:4px; }
.problem .file { color:var(--muted); font-size:12px; overflow-wrap:anywhere; }
details { margin:2px 0 4px; }
summary { cursor:pointer; color:#1f5fbf; font-size:12px; }
pre { margin:4px 0; padding:8px 10px; background:#f7f8fa; border:1px solid var(--line); border-radius:4px; max-height:420px; overflow:auto; font:12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space:pre; }
td.code { background:#fcfcfd; max-width:0; }
th.idx { width:72px; }
)css";

// Profiles in reading order: strict (our default) first, then kernelbench, then any others.
int profile_rank(const std::string& name) {
  if (name == "strict") return 0;
  if (name == "kernelbench") return 1;
  return 2;
}

std::string color_of(size_t index) {
  static const char* kColors[] = {"#1f6fd1", "#d1495b", "#2a9d55", "#8e5ad6", "#e08a00"};
  return kColors[index % (sizeof(kColors) / sizeof(kColors[0]))];
}

// A CSS class from a verdict name: letters, digits and '_' only.
std::string verdict_class(std::string_view verdict) {
  std::string out = "v-";
  for (char ch : verdict) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
    out += ok ? ch : '_';
  }
  return out;
}

std::string badge(std::string_view verdict, std::string_view suffix = "") {
  return "<span class=\"badge " + verdict_class(verdict) + "\">" + html::escape(verdict) + std::string(suffix) + "</span>";
}

std::string card(std::string_view value, std::string_view key) {
  return "<div class=\"card\"><div class=\"v\">" + std::string(value) + "</div><div class=\"k\">" + std::string(key) +
         "</div></div>";
}

std::string fact_value(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string run_facts(const Json& run) {
  if (!run.is_object() || run.empty()) return "<p class=\"note\">No run facts recorded.</p>";
  std::string out = "<table class=\"facts\">";
  for (const auto& [key, value] : run.items()) {
    out += "<tr><td>" + html::escape(key) + "</td><td>" + html::escape(fact_value(value)) + "</td></tr>";
  }
  return out + "</table>";
}

std::string problem_anchor(size_t index) { return "p-" + std::to_string(index); }

std::string no_timing_note() {
  return "<p class=\"note\">Timing not meaningful on CPU: no correct sample has a measured speedup, so fast_p, the "
         "geometric-mean speedup and the speedup histogram are not reported.</p>";
}

// pass@k for k = 1..max_k from the rows' (n, c); undefined where some problem has fewer than k samples.
html::CurveSeries curve_of(const ProfileMetrics& m, int max_k, std::string color) {
  html::CurveSeries s{m.profile, std::move(color), {}};
  for (int k = 1; k <= max_k; ++k) {
    std::optional<double> mean;
    if (!m.rows.empty()) {
      double sum = 0.0;
      bool complete = true;
      for (const ProblemRow& row : m.rows) {
        auto v = pass_at_k(row.n, row.c, k);  // an error exactly where k > n (or the row is malformed)
        if (!v.ok()) {
          complete = false;
          break;
        }
        sum += *v;
      }
      if (complete) mean = sum / static_cast<double>(m.rows.size());
    }
    s.values.push_back(mean);
  }
  return s;
}

std::string verdict_counts_html(const ProblemRow& row) {
  std::string out;
  for (const auto& [verdict, count] : row.verdict_counts) {
    std::string suffix(1, ' ');  // appended, not `" " + ...`: GCC 12 reports a false -Wrestrict on that form
    suffix += std::to_string(count);
    out += badge(verdict, suffix);
  }
  return out.empty() ? kDash : out;
}

std::string profile_section(const ProfileMetrics& m, const std::vector<double>& speedups, size_t color_index) {
  std::string out = "<section id=\"profile-" + html::escape(m.profile) + "\"><h2>Profile: " + html::escape(m.profile) + "</h2>";
  out += "<div class=\"cards\">";
  out += card(std::to_string(m.problems), "problems");
  const std::string pct = m.samples > 0 ? " (" + html::fixed(100.0 * m.correct / m.samples, 1) + "%)" : "";
  out += card(std::to_string(m.correct) + " / " + std::to_string(m.samples), "correct / samples" + pct);
  for (const auto& [k, v] : m.pass_at_k) out += card(html::fixed(v, 3), "pass@" + std::to_string(k));
  out += card(html::speedup_text(m.geomean_speedup), "geomean speedup (" + std::to_string(m.timed_samples) + " timed)");
  out += "</div>";

  const bool timed = std::any_of(m.fast_p.begin(), m.fast_p.end(), [](const auto& e) { return e.second.has_value(); });
  if (timed) {
    out += "<table><tr><th class=\"num\">p</th><th class=\"num\">fast_p (per sample)</th>"
           "<th class=\"num\">fast_p (best sample)</th></tr>";
    for (const auto& [p, v] : m.fast_p) {
      auto best = m.fast_p_best.find(p);
      out += "<tr><td class=\"num\">" + html::escape(metric_key(p)) + "</td><td class=\"num\">" + html::fixed(v, 3) +
             "</td><td class=\"num\">" + html::fixed(best == m.fast_p_best.end() ? std::nullopt : best->second, 3) +
             "</td></tr>";
    }
    out += "</table><p class=\"note\">fast_p: correct and speedup &gt; p (KernelBench). Per sample: mean over problems "
           "of the fraction of samples; best sample: fraction of problems whose fastest correct sample qualifies.</p>";
  }
  out += "<h3>Speedups of correct samples</h3>";
  if (!speedups.empty()) {
    out += html::speedup_histogram_svg(speedups, color_of(color_index));
  } else {
    // A timed run where nothing was correct still has fast_p (all zeros); only the histogram is empty.
    out += timed ? "<p class=\"note\">No correct sample has a measured speedup: nothing to plot.</p>" : no_timing_note();
  }

  out += "<h3>Problems</h3>";
  if (m.rows.empty()) return out + "<p class=\"note\">No problems in this run.</p></section>";
  out += "<table class=\"wide\"><tr><th>problem</th><th class=\"num\">level</th><th class=\"num\">n</th>"
         "<th class=\"num\">c</th><th class=\"num\">pass@1</th><th class=\"num\">best speedup</th><th>verdicts</th></tr>";
  for (size_t i = 0; i < m.rows.size(); ++i) {
    const ProblemRow& row = m.rows[i];
    const std::optional<double> pass1 =
        row.n > 0 ? std::optional<double>(static_cast<double>(row.c) / row.n) : std::nullopt;
    out += "<tr><td><a href=\"#" + problem_anchor(i) + "\">" + html::escape(row.id) + "</a></td><td class=\"num\">" +
           std::to_string(row.level) + "</td><td class=\"num\">" + std::to_string(row.n) + "</td><td class=\"num\">" +
           std::to_string(row.c) + "</td><td class=\"num\">" + html::fixed(pass1, 3) + "</td><td class=\"num\">" +
           html::speedup_text(row.best_speedup) + "</td><td>" + verdict_counts_html(row) + "</td></tr>";
  }
  return out + "</table></section>";
}

std::string code_block(const std::string& candidate_file, const std::filesystem::path& run_dir) {
  if (candidate_file.empty()) return "<p class=\"msg\">No candidate file recorded.</p>";
  auto code = read_text_file(run_dir / candidate_file, kMaxEmbeddedCodeBytes);
  std::string out = "<details><summary>code: " + html::escape(candidate_file) + "</summary>";
  if (!code.ok()) return out + "<p class=\"msg\">Could not read it: " + html::escape(code.status().to_string()) + "</p></details>";
  return out + "<pre><code>" + html::escape(*code) + "</code></pre></details>";
}

std::string problem_section(const ProblemOutcome& problem, size_t index, const std::vector<std::string>& profiles,
                            const std::filesystem::path& run_dir) {
  std::string out = "<section class=\"problem\" id=\"" + problem_anchor(index) + "\"><h3>" + html::escape(problem.id) +
                    " <a href=\"#top\" class=\"msg\">top</a></h3><div class=\"file\">" +
                    html::escape(problem.problem_file) + "</div>";
  // Rows by sample index; each profile's verdict side by side, the code once per distinct file.
  std::map<int, std::map<std::string, const SampleOutcome*>> by_sample;
  for (const std::string& profile : profiles) {
    auto it = problem.samples.find(profile);
    if (it == problem.samples.end()) continue;
    for (const SampleOutcome& s : it->second) by_sample[s.sample][profile] = &s;
  }
  if (by_sample.empty()) return out + "<p class=\"note\">No samples (n = 0).</p></section>";
  out += "<table class=\"wide\"><tr><th class=\"num idx\">sample</th>";
  for (const std::string& profile : profiles) out += "<th>" + html::escape(profile) + "</th>";
  out += "</tr>";
  for (const auto& [sample, per_profile] : by_sample) {
    out += "<tr id=\"" + problem_anchor(index) + "-s" + std::to_string(sample) + "\"><td class=\"num\">" +
           std::to_string(sample) + "</td>";
    std::vector<std::string> files;
    for (const std::string& profile : profiles) {
      auto it = per_profile.find(profile);
      if (it == per_profile.end()) {
        out += "<td>" + std::string(kDash) + "</td>";
        continue;
      }
      const SampleOutcome& s = *it->second;
      if (std::find(files.begin(), files.end(), s.candidate_file) == files.end()) files.push_back(s.candidate_file);
      out += "<td>" + badge(s.verdict);
      if (s.speedup) out += " <span class=\"num\">" + html::speedup_text(s.speedup) + "</span>";
      if (!s.rule.empty() || !s.message.empty()) {
        std::string why = s.rule.empty() ? s.message : s.message.empty() ? s.rule : s.rule + ": " + s.message;
        out += "<div class=\"msg\">" + html::escape(why) + "</div>";
      }
      out += "</td>";
    }
    out += "</tr><tr><td></td><td class=\"code\" colspan=\"" + std::to_string(profiles.size()) + "\">";
    for (const std::string& file : files) out += code_block(file, run_dir);
    out += "</td></tr>";
  }
  return out + "</table></section>";
}

}  // namespace

Result<std::string> render_html(const Json& report, const std::filesystem::path& run_dir) {
  if (!report.is_object()) {
    return error(ErrorCode::parse_error, "report: expected object, found " + std::string(json_type_name(report)));
  }
  auto profiles_json = report.find("profiles");
  auto problems_json = report.find("problems");
  if (profiles_json == report.end() || !profiles_json->is_object()) {
    return error(ErrorCode::parse_error, "report: expected object profiles");
  }
  if (problems_json == report.end() || !problems_json->is_array()) {
    return error(ErrorCode::parse_error, "report: expected array problems");
  }
  std::vector<ProfileMetrics> metrics;
  for (const auto& [name, value] : profiles_json->items()) {
    KLLM_ASSIGN_OR_RETURN(ProfileMetrics m, ProfileMetrics::from_json(value, "report.profiles." + name));
    metrics.push_back(std::move(m));
  }
  std::stable_sort(metrics.begin(), metrics.end(), [](const ProfileMetrics& a, const ProfileMetrics& b) {
    return profile_rank(a.profile) != profile_rank(b.profile) ? profile_rank(a.profile) < profile_rank(b.profile)
                                                              : a.profile < b.profile;
  });
  std::vector<std::string> profile_names;
  for (const ProfileMetrics& m : metrics) profile_names.push_back(m.profile);
  std::vector<ProblemOutcome> problems;
  for (size_t i = 0; i < problems_json->size(); ++i) {
    KLLM_ASSIGN_OR_RETURN(ProblemOutcome p,
                          ProblemOutcome::from_json((*problems_json)[i], "report.problems[" + std::to_string(i) + "]"));
    problems.push_back(std::move(p));
  }
  const Json run = report.contains("run") ? report.at("run") : Json::object();

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                    "<title>kernelllm eval report</title><style>";
  out += kStyle;
  out += "</style></head><body><main id=\"top\"><h1>kernelllm eval report</h1>";
  out += run_facts(run);
  out += "<nav><a href=\"#passk\">pass@k curve</a>";
  for (const ProfileMetrics& m : metrics) {
    out += "<a href=\"#profile-" + html::escape(m.profile) + "\">profile " + html::escape(m.profile) + "</a>";
  }
  out += "<a href=\"#candidates\">candidates</a></nav>";
  if (const Json left = report.value("left_out", Json::array()); left.is_array() && !left.empty()) {
    out += "<section id=\"left-out\"><h2>Partial report: " + std::to_string(left.size()) +
           " problem(s) left out</h2><p class=\"note\">Not in any number on this page (no verdict for every sample):</p><ul>";
    for (const Json& l : left) {
      out += "<li>" + html::escape(l.value("id", std::string("?"))) + ": " + html::escape(l.value("why", std::string())) +
             (l.contains("error") && l["error"].is_string() ? " &mdash; " + html::escape(l["error"].get<std::string>()) : "") +
             "</li>";
    }
    out += "</ul></section>";
  }

  int max_n = 0;
  for (const ProfileMetrics& m : metrics) {
    for (const ProblemRow& row : m.rows) max_n = std::max(max_n, row.n);
  }
  out += "<section id=\"passk\"><h2>pass@k</h2>";
  if (max_n == 0) {
    out += "<p class=\"note\">No samples in this run: nothing to plot.</p>";
  } else {
    std::vector<html::CurveSeries> series;
    for (size_t i = 0; i < metrics.size(); ++i) series.push_back(curve_of(metrics[i], max_n, color_of(i)));
    out += html::pass_at_k_curve_svg(series, max_n);
    out += "<p class=\"note\">Unbiased estimator 1 &minus; C(n&minus;c, k) / C(n, k), averaged over problems; a line "
           "stops where some problem has fewer than k samples.</p>";
  }
  out += "</section>";

  for (size_t i = 0; i < metrics.size(); ++i) {
    std::vector<double> speedups;
    for (const ProblemOutcome& p : problems) {
      auto it = p.samples.find(metrics[i].profile);
      if (it == p.samples.end()) continue;
      for (const SampleOutcome& s : it->second) {
        if (s.correct && s.speedup && *s.speedup > 0.0) speedups.push_back(*s.speedup);
      }
    }
    out += profile_section(metrics[i], speedups, i);
  }

  out += "<section id=\"candidates\"><h2>Candidates</h2>";
  if (problems.empty()) out += "<p class=\"note\">No problems in this run.</p>";
  for (size_t i = 0; i < problems.size(); ++i) out += problem_section(problems[i], i, profile_names, run_dir);
  out += "</section></main></body></html>\n";
  return out;
}

}  // namespace kernelllm::eval
