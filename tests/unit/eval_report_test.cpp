// Eval reports: the JSON document (deterministic, only the reported profiles, round trip), the
// HTML page (escaping of everything from candidates, empty runs, n = 0, CPU runs without timing)
// and write_reports. A synthetic 20-problem run doubles as the sample report for a browser check:
// with KERNELLLM_SAMPLE_REPORT_DIR set, its run dir and report (and a CPU variant under cpu/) are
// left there (tools/screenshot_report.sh renders them).
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"
#include "kernelllm/eval/report.h"

namespace kernelllm::eval {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("kllm_eval_report_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

SampleOutcome sample(int index, std::string verdict, std::optional<double> speedup, std::string file,
                     std::string rule = "", std::string message = "") {
  SampleOutcome s;
  s.sample = index;
  s.candidate_file = std::move(file);
  s.correct = verdict == "correct";
  s.verdict = std::move(verdict);
  s.rule = std::move(rule);
  s.message = std::move(message);
  s.speedup = speedup;
  return s;
}

// Two problems, both profiles; the second profile's verdicts differ on one sample.
ReportInput small_input() {
  ReportInput in;
  in.run = {{"model", "tiny"}, {"k", 2}, {"device", "cpu"}};
  in.metrics.ks = {1, 2};
  ProblemOutcome a;
  a.id = "level1/1_Add";
  a.level = 1;
  a.problem_file = "/problems/level1/1_Add.py";
  a.samples["strict"] = {sample(0, "correct", 1.5, "candidates/1_Add/0.py"),
                         sample(1, "wrong_output", std::nullopt, "candidates/1_Add/1.py", "", "max abs diff 3.2")};
  a.samples["kernelbench"] = {sample(0, "correct", 1.5, "candidates/1_Add/0.py"),
                              sample(1, "correct", 0.8, "candidates/1_Add/1.py")};
  a.samples["extra"] = {sample(0, "correct", 1.5, "candidates/1_Add/0.py")};
  ProblemOutcome b = a;
  b.id = "level1/2_Mul";
  b.problem_file = "/problems/level1/2_Mul.py";
  b.samples["strict"][0] = sample(0, "cheat", std::nullopt, "candidates/2_Mul/0.py", "returns_input", "output aliases input");
  b.samples["strict"][1] = sample(1, "correct", 3.0, "candidates/2_Mul/1.py");
  in.outcomes = {a, b};
  return in;
}

TEST(BuildReport, DeterministicDocumentWithReportedProfilesOnly) {
  ReportInput in = small_input();
  auto first = build_report(in);
  auto second = build_report(in);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->dump(1), second->dump(1));
  const Json& r = *first;
  std::vector<std::string> keys;
  for (const auto& [key, value] : r.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"problems", "profiles", "run"}));
  EXPECT_EQ(r["run"]["model"], "tiny");
  EXPECT_EQ(r["profiles"].size(), 2u);
  EXPECT_DOUBLE_EQ(r["profiles"]["strict"]["pass_at_k"]["1"].get<double>(), 0.5);  // (1/2 + 1/2) / 2
  EXPECT_DOUBLE_EQ(r["profiles"]["kernelbench"]["pass_at_k"]["1"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r["profiles"]["strict"]["pass_at_k"]["2"].get<double>(), 1.0);
  ASSERT_EQ(r["problems"].size(), 2u);
  EXPECT_EQ(r["problems"][1]["id"], "level1/2_Mul");
  EXPECT_FALSE(r["problems"][0]["samples"].contains("extra"));
  EXPECT_EQ(r["problems"][1]["samples"]["strict"][0]["rule"], "returns_input");
  EXPECT_TRUE(r["problems"][1]["samples"]["strict"][0]["speedup"].is_null());
  // A different outcome changes the bytes.
  in.outcomes[0].samples["strict"][1].verdict = "compile_error";
  EXPECT_NE(build_report(in)->dump(1), first->dump(1));
}

TEST(BuildReport, ErrorsForDuplicateOrIncompleteProfiles) {
  ReportInput in = small_input();
  in.profiles = {"strict", "strict"};
  auto dup = build_report(in);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("listed twice"), std::string::npos);
  in.profiles = {"strict", "missing"};
  auto missing = build_report(in);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no samples for profile missing"), std::string::npos)
      << missing.status().message();
}

TEST(OutcomeJson, RoundTrips) {
  const ProblemOutcome p = small_input().outcomes[1];
  auto back = ProblemOutcome::from_json(p.to_json(), "test");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), p.to_json());
  EXPECT_EQ(back->samples.at("strict")[0].message, "output aliases input");
  Json bad = p.to_json();
  bad["samples"]["strict"][0]["correct"] = "yes";
  auto err = ProblemOutcome::from_json(bad, "report.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("samples.strict[0]"), std::string::npos) << err.status().message();
}

TEST(RenderHtml, EscapesEverythingFromCandidatesAndMessages) {
  TempDir dir("escape");
  const std::string evil = "x = '</script><script>alert(1)</script>'  # <b>bold</b> & \"q\"\n";
  write(dir.path() / "candidates/1_Add/0.py", evil);
  write(dir.path() / "candidates/1_Add/1.py", "class ModelNew: pass\n");
  ReportInput in = small_input();
  in.outcomes[0].id = "level1/<b>1_Add</b>";
  in.outcomes[0].samples["strict"][1].message = "<b>bad</b> </script><script>alert(2)</script>";
  in.run["note"] = "<script>alert(3)</script>";
  auto report = build_report(in);
  ASSERT_TRUE(report.ok());
  auto html = render_html(*report, dir.path());
  ASSERT_TRUE(html.ok()) << html.status().to_string();
  EXPECT_EQ(html->find("<script"), std::string::npos);
  EXPECT_EQ(html->find("</script>"), std::string::npos);
  EXPECT_EQ(html->find("<b>"), std::string::npos);
  EXPECT_NE(html->find("x = &#39;&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&#39;  # &lt;b&gt;bold&lt;/b&gt; "
                       "&amp; &quot;q&quot;"),
            std::string::npos);
  EXPECT_NE(html->find("&lt;b&gt;bad&lt;/b&gt; &lt;/script&gt;&lt;script&gt;alert(2)"), std::string::npos);
  EXPECT_NE(html->find("level1/&lt;b&gt;1_Add&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html->find("&lt;script&gt;alert(3)"), std::string::npos);
  // Self-contained: nothing fetched from elsewhere.
  EXPECT_EQ(html->find("<link"), std::string::npos);
  EXPECT_EQ(html->find("src="), std::string::npos);
  EXPECT_EQ(html->find("url("), std::string::npos);
}

TEST(RenderHtml, ShowsChartsTablesAndUnreadableFiles) {
  TempDir dir("charts");
  write(dir.path() / "candidates/1_Add/0.py", "class ModelNew:\n    pass\n");
  auto report = build_report(small_input());
  ASSERT_TRUE(report.ok());
  auto html = render_html(*report, dir.path());
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("aria-label=\"pass@k curve\""), std::string::npos);
  EXPECT_NE(html->find("<polyline"), std::string::npos);
  EXPECT_NE(html->find("aria-label=\"speedup histogram\""), std::string::npos);
  EXPECT_NE(html->find("1\xC3\x97 = reference speed"), std::string::npos);
  EXPECT_NE(html->find("<a href=\"#p-1\">level1/2_Mul</a>"), std::string::npos);
  EXPECT_NE(html->find("id=\"p-1\""), std::string::npos);
  EXPECT_NE(html->find("returns_input: output aliases input"), std::string::npos);
  EXPECT_NE(html->find("<pre><code>class ModelNew:\n    pass\n</code></pre>"), std::string::npos);
  EXPECT_NE(html->find("code: candidates/2_Mul/0.py</summary><p class=\"msg\">Could not read it"), std::string::npos);
  EXPECT_LT(html->find("id=\"profile-strict\""), html->find("id=\"profile-kernelbench\""));
}

TEST(RenderHtml, CpuRunWithoutSpeedupsSaysTimingIsNotMeaningful) {
  ReportInput in = small_input();
  for (ProblemOutcome& p : in.outcomes) {
    for (auto& [profile, list] : p.samples) {
      for (SampleOutcome& s : list) s.speedup.reset();
    }
  }
  auto report = build_report(in);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE((*report)["profiles"]["strict"]["fast_p"]["1"].is_null());
  auto html = render_html(*report, "/nonexistent");
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("Timing not meaningful on CPU"), std::string::npos);
  EXPECT_EQ(html->find("aria-label=\"speedup histogram\""), std::string::npos);
  EXPECT_EQ(html->find("fast_p (per sample)"), std::string::npos);
  EXPECT_NE(html->find("aria-label=\"pass@k curve\""), std::string::npos);
}

TEST(RenderHtml, TimedRunWithoutCorrectSamplesKeepsFastPAndSaysNothingToPlot) {
  ReportInput in = small_input();
  in.metrics.timing_meaningful = true;
  for (ProblemOutcome& p : in.outcomes) {
    for (auto& [profile, list] : p.samples) {
      for (SampleOutcome& s : list) s = sample(s.sample, "wrong_output", std::nullopt, s.candidate_file);
    }
  }
  auto report = build_report(in);
  ASSERT_TRUE(report.ok());
  EXPECT_DOUBLE_EQ((*report)["profiles"]["strict"]["fast_p"]["0"].get<double>(), 0.0);
  auto html = render_html(*report, "/nonexistent");
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("fast_p (per sample)"), std::string::npos);
  EXPECT_NE(html->find("No correct sample has a measured speedup: nothing to plot."), std::string::npos);
  EXPECT_EQ(html->find("Timing not meaningful on CPU"), std::string::npos);
}

TEST(RenderHtml, EmptyRunAndZeroSampleProblems) {
  ReportInput empty;
  auto report = build_report(empty);
  ASSERT_TRUE(report.ok());
  auto html = render_html(*report, "/nonexistent");
  ASSERT_TRUE(html.ok()) << html.status().to_string();
  EXPECT_NE(html->find("No samples in this run"), std::string::npos);
  EXPECT_NE(html->find("No problems in this run"), std::string::npos);
  EXPECT_NE(html->find("No run facts recorded"), std::string::npos);

  // A report document with an n = 0 problem (as a hand-edited or merged file may hold).
  auto full = build_report(small_input());
  ASSERT_TRUE(full.ok());
  Json doc = *full;
  doc["problems"].push_back({{"id", "level1/3_Empty"}, {"level", 1}, {"problem_file", "/p/3.py"},
                             {"samples", {{"strict", Json::array()}}}});
  doc["profiles"]["strict"]["rows"].push_back({{"id", "level1/3_Empty"}, {"level", 1}, {"n", 0}, {"c", 0},
                                               {"pass_at_k", {{"1", nullptr}}}, {"best_speedup", nullptr},
                                               {"verdict_counts", Json::object()}});
  auto zero = render_html(doc, "/nonexistent");
  ASSERT_TRUE(zero.ok()) << zero.status().to_string();
  EXPECT_NE(zero->find("No samples (n = 0)."), std::string::npos);
  EXPECT_NE(zero->find("<a href=\"#p-2\">level1/3_Empty</a>"), std::string::npos);
}

TEST(RenderHtml, RejectsMalformedReports) {
  EXPECT_FALSE(render_html(Json::array(), ".").ok());
  auto missing = render_html(Json{{"profiles", Json::object()}}, ".");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("expected array problems"), std::string::npos);
}

TEST(WriteReports, WritesJsonThatReadsBackAndHtml) {
  TempDir dir("write");
  auto report = build_report(small_input());
  ASSERT_TRUE(report.ok());
  const fs::path out = dir.path() / "nested/report";
  ASSERT_TRUE(write_reports(*report, dir.path(), out).ok());
  auto json_text = read_text_file(out / "report.json");
  ASSERT_TRUE(json_text.ok());
  EXPECT_EQ(*json_text, report->dump(1) + "\n");
  auto parsed = parse_json(*json_text, "report.json");
  ASSERT_TRUE(parsed.ok());
  auto from_disk = render_html(*parsed, dir.path());
  auto html_text = read_text_file(out / "report.html");
  ASSERT_TRUE(html_text.ok());
  ASSERT_TRUE(from_disk.ok());
  EXPECT_EQ(*html_text, *from_disk);
  EXPECT_FALSE(fs::exists(out / "report.json.tmp"));
}

// A synthetic run like a real GPU eval: 20 problems, 10 samples, both profiles, speedups spread over
// 0.3-4x and several verdict kinds. Deterministic (fixed LCG), so its metrics are checked exactly
// against a recount here.
TEST(SampleReport, TwentyProblemSyntheticRun) {
  const char* keep = std::getenv("KERNELLLM_SAMPLE_REPORT_DIR");
  TempDir tmp("sample");
  const fs::path run_dir = keep ? fs::path(keep) : tmp.path();
  uint64_t state = 12345;
  auto next = [&]() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  const char* kFailures[][3] = {{"wrong_output", "", "max abs diff 0.125 at [3, 17] (atol 1e-05, rtol 1e-05)"},
                                {"compile_error", "triton_compile", "NameError: name 'tl' is not defined"},
                                {"cheat", "calls_reference", "ModelNew.forward calls torch.nn.functional.relu"},
                                {"runtime_error", "exception", "RuntimeError: shape mismatch: [128] vs [256]"},
                                {"timeout", "", "no result within 180 s"}};
  ReportInput in;
  in.run = {{"model", "KernelLLM (synthetic sample)"}, {"k", 10}, {"devices", {"cuda:0"}},
            {"problems", "KernelBench/level1"}, {"levels", {1}}, {"temperature", 0.6}};
  in.metrics.ks = {1, 5, 10};
  int correct_strict = 0;
  for (int p = 0; p < 20; ++p) {
    ProblemOutcome problem;
    problem.id = "level1/" + std::to_string(p + 1) + "_Op" + std::to_string(p + 1);
    problem.level = 1;
    problem.problem_file = "/data/KernelBench/" + problem.id + ".py";
    const double skill = next();
    for (int s = 0; s < 10; ++s) {
      const std::string file = "candidates/" + std::to_string(p + 1) + "/" + std::to_string(s) + ".py";
      write(run_dir / file, "import triton\nimport triton.language as tl\n\n@triton.jit\ndef kernel_" +
                                std::to_string(s) + "(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
                                "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs, "
                                "mask=offs < n)  # a deliberately long line that has to scroll inside its box "
                                "rather than stretch the page\n\nclass ModelNew:\n    pass\n");
      SampleOutcome strict;
      if (next() < skill) {
        strict = sample(s, "correct", std::exp(std::log(0.3) + next() * (std::log(4.0) - std::log(0.3))), file);
        correct_strict += 1;
      } else {
        const auto& f = kFailures[static_cast<size_t>(next() * 5) % 5];
        strict = sample(s, f[0], std::nullopt, file, f[1], f[2]);
      }
      SampleOutcome kb = strict;
      if (strict.verdict == "cheat") kb = sample(s, "correct", 1.1 + next(), file);
      problem.samples["strict"].push_back(strict);
      problem.samples["kernelbench"].push_back(kb);
    }
    in.outcomes.push_back(std::move(problem));
  }
  auto report = build_report(in);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const Json& strict = (*report)["profiles"]["strict"];
  EXPECT_EQ(strict["problems"], 20);
  EXPECT_EQ(strict["samples"], 200);
  EXPECT_EQ(strict["correct"], correct_strict);
  EXPECT_NEAR(strict["pass_at_k"]["1"].get<double>(), correct_strict / 200.0, 1e-12);
  EXPECT_GE((*report)["profiles"]["kernelbench"]["correct"].get<int>(), correct_strict);
  ASSERT_TRUE(write_reports(*report, run_dir, run_dir).ok());
  auto html = read_text_file(run_dir / "report.html");
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("<a href=\"#p-19\">level1/20_Op20</a>"), std::string::npos);
  EXPECT_NE(html->find("calls_reference: ModelNew.forward calls torch.nn.functional.relu"), std::string::npos);

  // The same run as a CPU run would record it: no speedups. Its report goes to cpu/ beside the first.
  for (ProblemOutcome& p : in.outcomes) {
    for (auto& [profile, list] : p.samples) {
      for (SampleOutcome& s : list) s.speedup.reset();
    }
  }
  auto cpu = build_report(in);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)["profiles"]["strict"]["pass_at_k"], strict["pass_at_k"]);
  ASSERT_TRUE(write_reports(*cpu, run_dir, run_dir / "cpu").ok());
  auto cpu_html = read_text_file(run_dir / "cpu" / "report.html");
  ASSERT_TRUE(cpu_html.ok());
  EXPECT_NE(cpu_html->find("Timing not meaningful on CPU"), std::string::npos);
}

}  // namespace
}  // namespace kernelllm::eval
