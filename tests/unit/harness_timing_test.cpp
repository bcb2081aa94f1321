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

TEST(TimingBudget, ASlowKernelsBatchStopsAfterFiveTimedRoundTripsPastTheBudget) {
  // A kernel of microseconds: 20 round trips of 10 ms never reach a 5 s budget.
  for (int n = 1; n < 20; ++n) EXPECT_FALSE(timed_trips_done(n, 20, n * 10.0, 5000)) << n;
  EXPECT_TRUE(timed_trips_done(20, 20, 200, 5000));
  // 64 calls of 50 ms: past the budget after two round trips, yet at least five are timed.
  for (int n = 1; n < kMinTimedTrips; ++n) EXPECT_FALSE(timed_trips_done(n, 20, n * 3300.0, 5000)) << n;
  EXPECT_TRUE(timed_trips_done(kMinTimedTrips, 20, kMinTimedTrips * 3300.0, 5000));
  // Fewer round trips asked than the minimum: all of them, budget or not.
  EXPECT_FALSE(timed_trips_done(2, 3, 1e6, 5000));
  EXPECT_TRUE(timed_trips_done(3, 3, 1e6, 5000));
  // A budget of 0 times the minimum and no more.
  EXPECT_FALSE(timed_trips_done(kMinTimedTrips - 1, 20, 0, 0));
  EXPECT_TRUE(timed_trips_done(kMinTimedTrips, 20, 0, 0));
}

TEST(TimingClock, PublishedTimesAreRoundTripsLessTwoPings) {
  double excess = 0;
  // 0.30 ms call (forward, copy into the output region, synchronize) + 0.12 ms check round trips,
  // 0.10 ms pings: 0.22 ms of work per call.
  std::vector<double> t = published_call_times({{0.30, 0.12, 0.05}, {0.32, 0.12, 0.05}}, 0.10, 0.05, &excess);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0], 0.22, 1e-12);
  EXPECT_NEAR(t[1], 0.24, 1e-12);
  EXPECT_EQ(excess, 0);
  // Noise never makes a time zero or negative.
  EXPECT_GT(published_call_times({{0.05, 0.05, 0}}, 0.10, 0.05, nullptr)[0], 0);
  // Work done while loading the set (beyond the judge's load) is charged to the call.
  EXPECT_NEAR(published_call_times({{0.30, 0.12, 0, 0.5}}, 0.10, 0.05, nullptr)[0], 0.72, 1e-12);
}

TEST(TimingClock, APairedRoundTripIsChargedOnlyItsCheckBeyondTheReferencesCheck) {
  // The reference's check of the same sets took 0.50 ms (a strict profile's compare); the
  // candidate's 0.53 ms: 0.03 ms of it is work the candidate left for after its reply.
  // (0.30 - 0.10 ping) + (0.53 - 0.50) = 0.23 ms.
  EXPECT_NEAR(published_call_times({{0.30, 0.53, 0, 0, 1, 0.50}}, 0.10, 0.05, nullptr)[0], 0.23, 1e-12);
  // Whatever the check costs, the same call publishes the same time: the speedup does not depend
  // on the profile's compare.
  EXPECT_NEAR(published_call_times({{0.30, 0.12, 0, 0, 1, 0.12}}, 0.10, 0.05, nullptr)[0],
              published_call_times({{0.30, 0.90, 0, 0, 1, 0.90}}, 0.10, 0.05, nullptr)[0], 1e-12);
  // A check faster than the baseline (noise) counts as it is, so noise does not bias the time up.
  EXPECT_NEAR(published_call_times({{0.30, 0.48, 0, 0, 1, 0.50}}, 0.10, 0.05, nullptr)[0], 0.18, 1e-12);
  // What the checks were charged beyond their baselines is summed (the timing JSON's
  // check_excess_ms): the positive parts of paired round trips only.
  double flushes = 0, checks = 0;
  (void)published_call_times({{0.30, 0.53, 0, 0, 1, 0.50}, {0.30, 0.48, 0, 0, 1, 0.50}, {0.30, 2.50, 0, 0, 22, 0.50},
                              {0.30, 0.90, 0, 0, 1, -1.0}},
                             0.10, 0.05, &flushes, &checks);
  EXPECT_NEAR(checks, 0.03 + 2.00, 1e-12);
}

TEST(TimingClock, WorkLeftQueuedByAnEarlyReplyIsChargedToItsCall) {
  double excess = 0;
  // A reply sent before the GPU finished: the judge's next flush waited 2 ms beyond its baseline,
  // charged beyond the threshold (0.1 ms here).
  std::vector<double> t = published_call_times({{0.20, 0.12, 2.05}}, 0.10, 0.05, &excess);
  EXPECT_NEAR(t[0], 0.12 + 1.9, 1e-12);
  EXPECT_NEAR(excess, 1.9, 1e-12);
  // No cliff at the threshold: a wait just beyond it adds just that much.
  excess = 0;
  t = published_call_times({{0.20, 0.12, 0.16}}, 0.10, 0.05, &excess);
  EXPECT_NEAR(t[0], 0.12 + 0.01, 1e-12);
  // A flush a little slower than its baseline (noise) is not charged.
  excess = 0;
  t = published_call_times({{0.20, 0.12, 0.09}}, 0.10, 0.05, &excess);
  EXPECT_NEAR(t[0], 0.12, 1e-12);
  EXPECT_EQ(excess, 0);
}

TEST(TimingClock, ARoundTripOfSeveralCallsPublishesEachCallsShare) {
  // 8 calls in one round trip: 2.0 ms call + 0.4 ms check round trips, 0.1 ms pings, 0.2 ms of load
  // excess: (2.4 - 0.2 + 0.2) / 8 = 0.3 ms per call; the flush wait is shared out the same way.
  CallClock trip{2.0, 0.4, 0, 0.2, 8};
  EXPECT_NEAR(published_call_times({trip}, 0.10, 0.05, nullptr)[0], 0.3, 1e-12);
  trip.next_flush_ms = 1.65;  // 1.6 ms beyond the baseline, 1.5 beyond the threshold
  double excess = 0;
  EXPECT_NEAR(published_call_times({trip}, 0.10, 0.05, &excess)[0], (2.4 - 0.2 + 0.2 + 1.5) / 8, 1e-12);
  EXPECT_NEAR(excess, 1.5, 1e-12);
}

TEST(TimingClock, TheProbeIsSparedOnlyWhenItsAnswerIsKnownWithoutIt) {
  // Room for one call a round trip (each call its own set; or the region), or a CPU: known.
  EXPECT_EQ(calls_per_trip_without_probe(true, 40, 23, 16 << 10), 1);
  EXPECT_EQ(calls_per_trip_without_probe(true, 23 * kMaxCallsPerTrip, 23, kTripRegionBytes), 1);
  EXPECT_EQ(calls_per_trip_without_probe(false, 8, 4, 64), kCpuCallsPerTrip);
  EXPECT_EQ(calls_per_trip_without_probe(false, 2, 4, 64), 1);
  // Room for more on a GPU: the reference's time decides, measured by the probe.
  EXPECT_EQ(calls_per_trip_without_probe(true, 23 * 2, 23, 16 << 10), 0);
  EXPECT_EQ(calls_per_trip_without_probe(true, 23 * kMaxCallsPerTrip, 23, 16 << 10), 0);
}

TEST(TimingClock, CallsPerRoundTripFollowTheReferencesTimeWithinTheSetsAndRegion) {
  // A microsecond kernel: as many calls as make kTripWorkMs, at most kMaxCallsPerTrip...
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 0.004), kMaxCallsPerTrip);
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 1.0), 10);
  // ...so that a microsecond kernel gets the cap whatever its jitter (0.04-0.09 ms per call on an H200)...
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 0.04), kMaxCallsPerTrip);
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 0.09), kMaxCallsPerTrip);
  // ...one when a call is long enough alone...
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 12.0), 1);
  // ...or when the sets (each call its own) or the output region (kTripRegionBytes) do not fit more.
  EXPECT_EQ(calls_per_trip_for(true, 40, 23, 16 << 10, 0.004), 1);
  EXPECT_EQ(calls_per_trip_for(true, 23 * 3, 23, 16 << 10, 0.004), 3);
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, kTripRegionBytes / 4, 0.004), 4);
  // An unknown reference time (no CUDA events) takes the most that fit.
  EXPECT_EQ(calls_per_trip_for(true, 23 * kMaxCallsPerTrip, 23, 16 << 10, 0), kMaxCallsPerTrip);
  // On CPU (times not meaningful) always kCpuCallsPerTrip where the sets allow.
  EXPECT_EQ(calls_per_trip_for(false, 8, 4, 64, 0.01), kCpuCallsPerTrip);
  EXPECT_EQ(calls_per_trip_for(false, 2, 4, 64, 0.01), 1);
}

TEST(TimingClock, RooflineAndStability) {
  TimingResult t;
  t.times_ms = {0.05, 0.05, 0.05, 0.05};
  t.stats = timing_stats(t.times_ms);
  EXPECT_EQ(roofline_violation(t, 0.001, 4096, 3350), "");
  EXPECT_NE(roofline_violation(t, 0.06, 4096, 3350).find("roofline floor"), std::string::npos);
  EXPECT_FALSE(timing_unstable(t));
  t.times_ms = {0.05, 0.05, 0.2, 0.2};
  t.stats = timing_stats(t.times_ms);
  EXPECT_TRUE(timing_unstable(t));
}

TEST(TimingClock, TheIdleFlushBaselineIsCappedByTheSetUpFloor) {
  // A median within 3x the quickest set-up flush plus 0.5 ms stands; work queued while it was
  // measured (a time slice per flush) cannot raise it past that; without a floor it stands as is.
  EXPECT_EQ(capped_flush_baseline(0.09, 0.08), 0.09);
  EXPECT_NEAR(capped_flush_baseline(4.0, 0.08), 3 * 0.08 + 0.5, 1e-12);
  EXPECT_NEAR(capped_flush_baseline(0.74, 0.08), 0.74, 1e-12);
  EXPECT_EQ(capped_flush_baseline(4.0, 0.0), 4.0);
}

TEST(TimingClock, TheReferencesTimingIsTheReferenceSideOfAPairedBatch) {
  // The reference has no batch of its own: the device's first paired batch gives its timing, its
  // round trips' per-call times, loads and the idle flush baseline measured at the batch's start,
  // and names the candidate beside which it ran. Nothing of the candidate's own times goes in.
  TimingResult t;
  t.meaningful = true;
  t.times_ms = {0.20, 0.22, 0.21};
  t.stats = timing_stats(t.times_ms);
  t.paired_ref_ms = {0.10, 0.12, 0.11};
  t.paired_load_ms = {1.5, 1.4, 1.6};
  t.load_ms = {0, 0, 0};
  t.calls_per_trip = 64;
  t.warmup_trips = 3;
  t.ping_ms = 0.05;
  t.flush_median_ms = 0.09;
  t.flush_floor_ms = 0.08;
  t.flush_baseline_ms = 0.09;
  t.cpu = 15;
  const TimingResult ref = reference_from_paired(t, "/c/cand.py");
  EXPECT_EQ(ref.times_ms, t.paired_ref_ms);
  EXPECT_NEAR(ref.stats.median_ms, 0.11, 1e-12);
  EXPECT_EQ(ref.stats.n, 3);
  EXPECT_EQ(ref.load_ms, t.paired_load_ms);
  EXPECT_TRUE(ref.paired_ref_ms.empty()) << "the reference's timing is not itself paired";
  EXPECT_EQ(ref.calls_per_trip, 64);
  EXPECT_EQ(ref.warmup_trips, 3);
  EXPECT_EQ(ref.cpu, 15);
  EXPECT_EQ(ref.flush_baseline_ms, 0.09);
  EXPECT_EQ(ref.flush_floor_ms, 0.08);
  EXPECT_EQ(ref.paired_with, "/c/cand.py");
  EXPECT_TRUE(ref.meaningful);
}

TEST(TimingClock, PairedSpeedupsFollowTheMachineNotTheClockTime) {
  // A machine twice as slow for the second half of the batch: both sides' round trips slow down,
  // the candidate's median moves with them, its paired ratios stay put.
  TimingResult t;
  t.times_ms = {0.10, 0.10, 0.20, 0.20};
  t.paired_ref_ms = {0.05, 0.05, 0.10, 0.10};
  t.stats = timing_stats(t.times_ms);
  const std::vector<double> s = paired_speedups(t);
  ASSERT_EQ(s.size(), 4u);
  for (double x : s) EXPECT_NEAR(x, 0.5, 1e-12);
  // The candidate's own spread flags it; a stable ratio does not excuse that.
  EXPECT_TRUE(timing_unstable(t));
  t.times_ms = {0.10, 0.10, 0.11, 0.11};
  t.paired_ref_ms = {0.05, 0.05, 0.055, 0.055};
  t.stats = timing_stats(t.times_ms);
  EXPECT_FALSE(timing_unstable(t));
  // Ratios that disagree (the reference's round trips jumping while the candidate's did not).
  t.paired_ref_ms = {0.05, 0.05, 0.30, 0.30};
  EXPECT_TRUE(timing_unstable(t));
  // Unpaired (the reference's own batch, a CPU run, a cache entry from before): no ratios.
  t.paired_ref_ms = {0.05};
  EXPECT_TRUE(paired_speedups(t).empty());
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
