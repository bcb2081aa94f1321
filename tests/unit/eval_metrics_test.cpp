// Eval metrics: pass@k against hand-computed values and a direct binomial formula, fast_p at its
// strict boundary, geometric-mean speedup, per-problem rows, null rules and the JSON round trip.
#include <cmath>

#include <gtest/gtest.h>

#include "kernelllm/eval/metrics.h"

namespace kernelllm::eval {
namespace {

SampleOutcome sample(int index, bool correct, std::optional<double> speedup = std::nullopt,
                     std::string verdict = "") {
  SampleOutcome s;
  s.sample = index;
  s.candidate_file = "candidates/p/" + std::to_string(index) + ".py";
  s.correct = correct;
  s.verdict = verdict.empty() ? (correct ? "correct" : "wrong_output") : verdict;
  s.speedup = speedup;
  return s;
}

ProblemOutcome problem(std::string id, std::vector<SampleOutcome> samples, std::string profile = "strict") {
  ProblemOutcome p;
  p.id = std::move(id);
  p.level = 1;
  p.problem_file = "/problems/" + p.id + ".py";
  p.samples[profile] = std::move(samples);
  return p;
}

// C(a, b) directly in long double, for comparison.
long double binomial(int a, int b) {
  if (b < 0 || b > a) return 0.0L;
  long double r = 1.0L;
  for (int i = 1; i <= b; ++i) r = r * static_cast<long double>(a - b + i) / static_cast<long double>(i);
  return r;
}

TEST(PassAtK, HandComputedValues) {
  EXPECT_DOUBLE_EQ(*pass_at_k(5, 2, 1), 0.4);
  EXPECT_NEAR(*pass_at_k(5, 2, 2), 0.7, 1e-15);  // 1 - C(3,2)/C(5,2) = 1 - 3/10
  EXPECT_NEAR(*pass_at_k(10, 3, 5), 1.0 - 21.0 / 252.0, 1e-15);  // C(7,5)=21, C(10,5)=252
  EXPECT_DOUBLE_EQ(*pass_at_k(5, 0, 1), 0.0);
  EXPECT_DOUBLE_EQ(*pass_at_k(5, 0, 5), 0.0);
  EXPECT_DOUBLE_EQ(*pass_at_k(5, 5, 1), 1.0);
}

TEST(PassAtK, OneWhenFewerThanKWrongSamples) {
  EXPECT_DOUBLE_EQ(*pass_at_k(5, 4, 2), 1.0);   // n - c = 1 < 2
  EXPECT_DOUBLE_EQ(*pass_at_k(20, 1, 20), 1.0);  // k = n with one correct
  EXPECT_DOUBLE_EQ(*pass_at_k(1, 1, 1), 1.0);
}

TEST(PassAtK, LargeNMatchesDirectBinomialWithoutOverflow) {
  for (int c : {0, 1, 7, 50, 123, 199}) {
    for (int k : {1, 10, 20, 100}) {
      const long double direct = 1.0L - binomial(200 - c, k) / binomial(200, k);
      auto v = pass_at_k(200, c, k);
      ASSERT_TRUE(v.ok());
      EXPECT_NEAR(*v, static_cast<double>(direct), 1e-12) << "c=" << c << " k=" << k;
    }
  }
  auto big = pass_at_k(5000, 3, 1000);
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(std::isfinite(*big));
  EXPECT_NEAR(*big, 1.0 - (4000.0 / 5000.0) * (3999.0 / 4999.0) * (3998.0 / 4998.0), 1e-12);
}

TEST(PassAtK, RejectsBadArguments) {
  for (auto [n, c, k] : {std::tuple{5, 6, 1}, {5, -1, 1}, {5, 2, 0}, {5, 2, 6}, {0, 0, 1}, {-1, 0, 1}}) {
    auto v = pass_at_k(n, c, k);
    ASSERT_FALSE(v.ok()) << n << " " << c << " " << k;
    EXPECT_EQ(v.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(v.status().message().find("found n=" + std::to_string(n)), std::string::npos) << v.status().message();
  }
}

TEST(ComputeMetrics, PassAtKIsMeanOverProblemsAndNullWhenSomeNBelowK) {
  // Problem a: n=5, c=2; problem b: n=5, c=0; problem c: n=3, c=3.
  std::vector<ProblemOutcome> outcomes = {
      problem("a", {sample(0, true), sample(1, false), sample(2, true), sample(3, false), sample(4, false)}),
      problem("b", {sample(0, false), sample(1, false), sample(2, false), sample(3, false), sample(4, false)}),
      problem("c", {sample(0, true), sample(1, true), sample(2, true)}),
  };
  MetricsOptions options;
  options.ks = {1, 2, 4};
  auto m = compute_metrics(outcomes, "strict", options);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->problems, 3);
  EXPECT_EQ(m->samples, 13);
  EXPECT_EQ(m->correct, 5);
  EXPECT_NEAR(*m->pass_at_k.at(1), (0.4 + 0.0 + 1.0) / 3.0, 1e-15);
  EXPECT_NEAR(*m->pass_at_k.at(2), (0.7 + 0.0 + 1.0) / 3.0, 1e-15);
  EXPECT_FALSE(m->pass_at_k.at(4).has_value());  // problem c has n = 3 < 4
  ASSERT_EQ(m->rows.size(), 3u);
  EXPECT_EQ(m->rows[0].id, "a");
  EXPECT_EQ(m->rows[0].n, 5);
  EXPECT_EQ(m->rows[0].c, 2);
  EXPECT_NEAR(*m->rows[0].pass_at_k.at(4), 1.0, 1e-15);  // n - c = 3 < 4
  EXPECT_FALSE(m->rows[2].pass_at_k.at(4).has_value());
  EXPECT_EQ(m->rows[0].verdict_counts.at("correct"), 2);
  EXPECT_EQ(m->rows[0].verdict_counts.at("wrong_output"), 3);
  EXPECT_EQ(m->rows[1].verdict_counts.count("correct"), 0u);
}

TEST(ComputeMetrics, FastPIsStrictlyGreaterThanPPerSampleAndBest) {
  // Problem a: 4 samples, correct speedups 1.0 and 2.0, one incorrect with a speedup (ignored), one wrong.
  // Problem b: 2 samples, correct speedup 0.5 and a compile error.
  std::vector<ProblemOutcome> outcomes = {
      problem("a", {sample(0, true, 1.0), sample(1, true, 2.0), sample(2, false, 8.0), sample(3, false)}),
      problem("b", {sample(0, true, 0.5), sample(1, false, std::nullopt, "compile_error")}),
  };
  MetricsOptions options;
  options.ks = {1};
  options.ps = {0.0, 0.5, 1.0, 1.5, 2.0};
  auto m = compute_metrics(outcomes, "strict", options);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // fast_0: a 2/4, b 1/2 → 0.5. fast_0.5: a 2/4, b 0 (0.5 is not > 0.5) → 0.25.
  EXPECT_DOUBLE_EQ(*m->fast_p.at(0.0), 0.5);
  EXPECT_DOUBLE_EQ(*m->fast_p.at(0.5), 0.25);
  EXPECT_DOUBLE_EQ(*m->fast_p.at(1.0), 0.125);  // only 2.0 in a: 1/4, b 0
  EXPECT_DOUBLE_EQ(*m->fast_p.at(1.5), 0.125);
  EXPECT_DOUBLE_EQ(*m->fast_p.at(2.0), 0.0);  // 2.0 is not > 2 and the incorrect 8.0 never counts
  // Best sample: a 2.0, b 0.5.
  EXPECT_DOUBLE_EQ(*m->fast_p_best.at(0.0), 1.0);
  EXPECT_DOUBLE_EQ(*m->fast_p_best.at(0.5), 0.5);
  EXPECT_DOUBLE_EQ(*m->fast_p_best.at(1.5), 0.5);
  EXPECT_DOUBLE_EQ(*m->fast_p_best.at(2.0), 0.0);
  EXPECT_DOUBLE_EQ(*m->rows[0].best_speedup, 2.0);
  EXPECT_DOUBLE_EQ(*m->rows[1].best_speedup, 0.5);
  EXPECT_EQ(m->timed_samples, 3);
  // geomean of {1, 2, 0.5} = 1.
  EXPECT_NEAR(*m->geomean_speedup, 1.0, 1e-15);
}

TEST(ComputeMetrics, GeomeanOfTwoAndHalfIsOne) {
  auto m = compute_metrics({problem("a", {sample(0, true, 2.0), sample(1, true, 0.5)})}, "strict");
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(*m->geomean_speedup, 1.0, 1e-15);
  auto m4 = compute_metrics({problem("a", {sample(0, true, 2.0), sample(1, true, 8.0)})}, "strict");
  ASSERT_TRUE(m4.ok());
  EXPECT_NEAR(*m4->geomean_speedup, 4.0, 1e-14);
}

TEST(ComputeMetrics, NoSpeedupsMeansNullFastPAndGeomean) {
  auto m = compute_metrics({problem("a", {sample(0, true), sample(1, false)})}, "strict");
  ASSERT_TRUE(m.ok());
  for (const auto& [p, v] : m->fast_p) EXPECT_FALSE(v.has_value()) << p;
  for (const auto& [p, v] : m->fast_p_best) EXPECT_FALSE(v.has_value()) << p;
  EXPECT_FALSE(m->geomean_speedup.has_value());
  EXPECT_EQ(m->timed_samples, 0);
  EXPECT_FALSE(m->rows[0].best_speedup.has_value());
  EXPECT_FALSE(m->pass_at_k.at(10).has_value());  // n = 2 < 10
  EXPECT_DOUBLE_EQ(*m->pass_at_k.at(1), 0.5);
}

TEST(ComputeMetrics, TimingMeaningfulOverridesInference) {
  std::vector<ProblemOutcome> none_correct = {problem("a", {sample(0, false), sample(1, false)})};
  MetricsOptions gpu;
  gpu.timing_meaningful = true;
  auto m = compute_metrics(none_correct, "strict", gpu);
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(*m->fast_p.at(0.0), 0.0);
  EXPECT_DOUBLE_EQ(*m->fast_p_best.at(1.0), 0.0);
  EXPECT_FALSE(m->geomean_speedup.has_value());

  MetricsOptions cpu;
  cpu.timing_meaningful = false;
  auto c = compute_metrics({problem("a", {sample(0, true, 3.0)})}, "strict", cpu);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->fast_p.at(1.0).has_value());
}

TEST(ComputeMetrics, EmptyRunHasNullPassAtK) {
  auto m = compute_metrics({}, "strict");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->problems, 0);
  EXPECT_FALSE(m->pass_at_k.at(1).has_value());
  EXPECT_FALSE(m->fast_p.at(1.0).has_value());
  EXPECT_TRUE(m->rows.empty());
}

TEST(ComputeMetrics, ProblemWithoutSamplesForProfileIsAnError) {
  auto m = compute_metrics({problem("a", {sample(0, true)}, "kernelbench")}, "strict");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(m.status().message().find("problem a"), std::string::npos) << m.status().message();
  auto empty = compute_metrics({problem("b", {}, "strict")}, "strict");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("n = 0"), std::string::npos);
}

TEST(ComputeMetrics, RejectsBadSpeedupsAndBadK) {
  auto negative = compute_metrics({problem("a", {sample(0, true, -1.0)})}, "strict");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("positive finite speedup, found -1"), std::string::npos);
  auto nan = compute_metrics({problem("a", {sample(0, true, std::nan(""))})}, "strict");
  EXPECT_FALSE(nan.ok());
  MetricsOptions zero_k;
  zero_k.ks = {0};
  auto k = compute_metrics({problem("a", {sample(0, true)})}, "strict", zero_k);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("k >= 1, found 0"), std::string::npos);
}

TEST(ProfileMetricsJson, KeysAreShortestDecimalsAndAbsentValuesNull) {
  EXPECT_EQ(metric_key(1), "1");
  EXPECT_EQ(metric_key(0.5), "0.5");
  EXPECT_EQ(metric_key(0.8), "0.8");
  EXPECT_EQ(metric_key(0), "0");
  auto m = compute_metrics({problem("a", {sample(0, true), sample(1, false)})}, "strict");
  ASSERT_TRUE(m.ok());
  Json j = m->to_json();
  EXPECT_EQ(j["profile"], "strict");
  EXPECT_DOUBLE_EQ(j["pass_at_k"]["1"].get<double>(), 0.5);
  EXPECT_TRUE(j["pass_at_k"]["10"].is_null());
  EXPECT_TRUE(j["pass_at_k"]["20"].is_null());
  EXPECT_TRUE(j["fast_p"]["0.5"].is_null());
  EXPECT_TRUE(j["fast_p_best"]["1.5"].is_null());
  EXPECT_TRUE(j["geomean_speedup"].is_null());
  EXPECT_EQ(j["rows"][0]["verdict_counts"]["wrong_output"], 1);
}

TEST(ProfileMetricsJson, RoundTripsThroughFromJson) {
  std::vector<ProblemOutcome> outcomes = {
      problem("a", {sample(0, true, 1.25), sample(1, false), sample(2, true, 3.0)}),
      problem("b", {sample(0, true, 0.75), sample(1, false, std::nullopt, "cheat")}),
  };
  auto m = compute_metrics(outcomes, "strict");
  ASSERT_TRUE(m.ok());
  auto back = ProfileMetrics::from_json(m->to_json(), "test");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), m->to_json());
  EXPECT_EQ(back->rows[1].verdict_counts.at("cheat"), 1);
  EXPECT_DOUBLE_EQ(*back->fast_p_best.at(0.8), 0.5);  // a: best 3.0; b: best 0.75 is not > 0.8

  Json broken = m->to_json();
  broken["pass_at_k"]["x"] = 1;
  auto bad = ProfileMetrics::from_json(broken, "report.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected a number as key of pass_at_k, found \"x\""), std::string::npos)
      << bad.status().message();
}

TEST(ComputeMetrics, MultishapeCountsCorrectSamplesCheckedAndFailing) {
  auto shaped = [](int i, bool correct, const char* result) {
    SampleOutcome s = sample(i, correct);
    s.multishape = result;
    return s;
  };
  // A wrong sample never has a result (the check runs only on correct ones); b has no result at all.
  auto m = compute_metrics({problem("a", {shaped(0, true, "pass"), shaped(1, true, "fail"), sample(2, false)}),
                            problem("b", {sample(0, true)})},
                           "strict");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->multishape_checked, 2);
  EXPECT_EQ(m->multishape_failed, 1);
  Json j = m->to_json();
  EXPECT_EQ(j["multishape"], (Json{{"checked", 2}, {"failed", 1}}));
  auto back = ProfileMetrics::from_json(j, "test");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json(), j);
  // Without the check the key is absent, so reports of runs without it keep their bytes.
  auto plain = compute_metrics({problem("a", {sample(0, true)})}, "strict");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->to_json().contains("multishape"));
  EXPECT_FALSE(shaped(0, true, "pass").to_json().is_null());
  EXPECT_FALSE(sample(0, true).to_json().contains("multishape"));
  Json odd = shaped(0, true, "pass").to_json();
  odd["multishape"] = "maybe";
  EXPECT_FALSE(SampleOutcome::from_json(odd, "test").ok());
}

}  // namespace
}  // namespace kernelllm::eval
