// Median/IQR statistics, noise-aware finalist selection, roofline floor, verdict names, devices.
#include <gtest/gtest.h>

#include "kernelllm/harness/timing.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {
namespace {

TEST(TimingStats, MedianAndQuartilesInterpolate) {
  TimingStats s = timing_stats({5, 1, 3, 2, 4});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median_ms, 3);
  EXPECT_DOUBLE_EQ(s.q1_ms, 2);
  EXPECT_DOUBLE_EQ(s.q3_ms, 4);
  EXPECT_DOUBLE_EQ(s.min_ms, 1);
  TimingStats e = timing_stats({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(e.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(e.q1_ms, 1.75);
  EXPECT_DOUBLE_EQ(e.iqr_ms(), 1.5);
  EXPECT_EQ(timing_stats({}).n, 0u);
}

TEST(TimingStats, OneOutlierDoesNotMoveTheMedian) {
  TimingStats s = timing_stats({1, 1, 1, 1, 1000});
  EXPECT_DOUBLE_EQ(s.median_ms, 1);
}

TEST(SelectFinalist, FastestWinsOnlyBeyondNoise) {
  std::vector<Finalist> f = {{{2.0, 2.1, 2.2, 2.05}, 100}, {{1.0, 1.1, 1.05, 1.02}, 500}};
  Selection s = select_finalist(f);
  EXPECT_EQ(s.index, 1u);
  EXPECT_TRUE(s.by_speed);
}

TEST(SelectFinalist, OverlappingIntervalsPickTheShortestSource) {
  std::vector<Finalist> f = {{{1.00, 1.10, 1.20, 1.30}, 900}, {{1.05, 1.15, 1.25, 1.35}, 300}, {{5, 5, 5, 5}, 10}};
  Selection s = select_finalist(f);
  EXPECT_EQ(s.index, 1u);  // the 10-byte one is far slower, not tied
  EXPECT_FALSE(s.by_speed);
}

TEST(Roofline, FloorIsBytesOverBandwidth) {
  EXPECT_DOUBLE_EQ(roofline_floor_ms(3'350'000'000ULL, 3350), 1.0);  // 3.35 GB at 3.35 TB/s
  EXPECT_DOUBLE_EQ(peak_bandwidth_for("NVIDIA H100 80GB HBM3"), 3350);
  EXPECT_DOUBLE_EQ(peak_bandwidth_for("NVIDIA H200"), 4800);
  EXPECT_DOUBLE_EQ(peak_bandwidth_for("Some Future GPU"), 10000);
}

// A timed run of `n` calls with event time `event_ms` each and `gap_ms` more per call on the
// worker's wall clock; the orchestrator saw `extra_ms` more than the worker.
TimingResult timed(double event_ms, double gap_ms, int n = 10, double extra_ms = 5) {
  TimingResult t;
  t.meaningful = true;
  t.times_ms.assign(n, event_ms);
  t.stats = timing_stats(t.times_ms);
  t.event_total_ms = event_ms * n;
  t.wall_total_ms = (event_ms + gap_ms) * n;
  t.orchestrator_wall_ms = t.wall_total_ms + extra_ms;
  return t;
}

TEST(TimingChecks, ClocksAndFloor) {
  EXPECT_EQ(clock_violation(timed(0.05, 0.3), 0.001, 4096, 3350), "");
  TimingResult lying = timed(0.05, 0.3);
  lying.orchestrator_wall_ms = lying.wall_total_ms / 2;  // the worker claims more time than passed
  EXPECT_NE(clock_violation(lying, 0.001, 4096, 3350).find("orchestrator's clock"), std::string::npos);
  TimingResult events_over_wall = timed(1.0, 0.0);
  events_over_wall.wall_total_ms = 2.0;
  events_over_wall.orchestrator_wall_ms = 20.0;
  EXPECT_NE(clock_violation(events_over_wall, 0.001, 4096, 3350).find("exceeds the worker's wall clock"), std::string::npos);
  EXPECT_NE(clock_violation(timed(0.05, 0.3), 0.06, 4096, 3350).find("roofline floor"), std::string::npos);
}

TEST(TimingChecks, GapBeyondTheReferenceIsFlaggedWithSlack) {
  TimingResult ref = timed(0.01, 0.3);
  EXPECT_NEAR(per_call_wall_gap_ms(ref), 0.3, 1e-9);
  // An honest Python wrapper: 0.9 ms against the reference's 0.3 ms passes.
  EXPECT_EQ(gap_violation(timed(0.01, 0.9), ref), "");
  // 5 ms of hidden work per call on a 0.01 ms kernel is flagged.
  EXPECT_NE(gap_violation(timed(0.01, 5.3), ref).find("per-call wall-clock gap"), std::string::npos);
  // A slow candidate gets 5 x its median of slack: 4 ms extra on a 1 ms kernel passes.
  EXPECT_EQ(gap_violation(timed(1.0, 4.3), ref), "");
  // Outside load widens both gaps when they are timed back to back: the difference decides.
  EXPECT_EQ(gap_violation(timed(0.01, 5.3), timed(0.01, 4.8)), "");
}

TEST(Verdicts, NamesRoundTrip) {
  for (Verdict v : {Verdict::correct, Verdict::wrong_output, Verdict::wrong_shape, Verdict::compile_error, Verdict::runtime_error,
                    Verdict::crash, Verdict::timeout, Verdict::cheat, Verdict::sandbox_violation, Verdict::undiscriminating,
                    Verdict::environment_error, Verdict::not_verified}) {
    auto back = verdict_from_name(verdict_name(v));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, v);
  }
  EXPECT_FALSE(verdict_from_name("passed").has_value());
}

TEST(ParseDevices, AcceptsCpuCudaAndListsRejectsTheRest) {
  EXPECT_EQ(*parse_devices("cpu"), std::vector<std::string>{"cpu"});
  EXPECT_EQ(*parse_devices("cuda:0,cuda:1"), (std::vector<std::string>{"cuda:0", "cuda:1"}));
  EXPECT_EQ(*parse_devices("cuda"), std::vector<std::string>{"cuda"});
  EXPECT_FALSE(parse_devices("gpu").ok());
  EXPECT_FALSE(parse_devices("cuda:x").ok());
  EXPECT_FALSE(parse_devices("cpu,cuda:0").ok());
  EXPECT_FALSE(parse_devices("").ok());
}

}  // namespace
}  // namespace kernelllm::harness
