// The verifier's sessions and its zygote end to end on CPU (Triton interpreter in the workers):
// VerifySession over a fixed set and over a feed of candidates, the multi-shape check before the
// next candidate, and a zygote whose forked judge or worker misbehaves.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernelllm/harness/verify.h"
#include "parity/verify_support.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;
using harness::Verdict;
using test_support::live_children;
using test_support::no_children_within;
using test_support::case_files;
using test_support::patched_package;
using test_support::quick_options;

TEST(VerifySession, VerifiesOnceWithTheVerdictsOfVerify) {
  harness::VerifyOptions o = quick_options();
  const auto [dir, problem, good, bad] = case_files("kernelllm-session-test");
  {
    harness::VerifySession session(problem.string(), o, 3);  // fewer candidates come than expected
    std::vector<size_t> announced;
    auto rep = session.verify({bad.string(), good.string()}, [&](size_t i, const harness::CandidateResult&) {
      announced.push_back(i);
    });
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    EXPECT_GE(session.setup_ms(), 0);
    ASSERT_EQ(rep->candidates.size(), 2u);
    EXPECT_EQ(rep->candidates[0].verdict, Verdict::wrong_output);
    EXPECT_EQ(rep->candidates[1].verdict, Verdict::correct);
    ASSERT_TRUE(rep->selected.has_value());
    EXPECT_EQ(*rep->selected, 1u);
    std::sort(announced.begin(), announced.end());
    EXPECT_EQ(announced, (std::vector<size_t>{0, 1}));
    auto again = session.verify({good.string()});
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find("one set of candidates"), std::string::npos) << again.status().message();
  }
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  {
    // A problem that cannot be set up: verify() says so, as harness::verify does.
    const fs::path broken = dir / "broken.py";
    { std::ofstream(broken) << "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    raise RuntimeError('no')\n"
                                "def get_init_inputs():\n    return []\n"; }
    harness::VerifySession session(broken.string(), o, 1);
    auto rep = session.verify({good.string()});
    ASSERT_FALSE(rep.ok());
    auto direct = harness::verify(broken.string(), {good.string()}, o);
    ASSERT_FALSE(direct.ok());
    EXPECT_EQ(rep.status().code(), direct.status().code()) << rep.status().to_string() << " / " << direct.status().to_string();
  }
  {
    harness::VerifySession unused(problem.string(), o, 2);  // never given candidates
  }
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  fs::remove_all(dir);
}

TEST(VerifyZygote, AForkedJudgeThatDoesNotGreetIsForkedAgainThenStartedByExec) {
  // A copy of the worker package whose zygote fails a judge it forks as C failed in CI and on an
  // H200 ("the intermediate process did not exit"): once, the judge is forked again (a warning
  // says why, nothing is started by exec); every time, the judge is started by exec after a second
  // fork, and the report's worker_start says why. Either way the call still verifies.
  const auto [dir, problem, good, bad] = case_files("kernelllm-judge-retry");
  const fs::path failed_once = dir / "failed-once";
  harness::VerifyOptions o = quick_options();
  // (A temporary path: no quote in it. Appended: GCC 12 warns of an overlap in "'" + path + "'".)
  const std::string marker = std::string("'").append(failed_once.string()).append("'");
  auto verify_with = [&](const std::string& name, const std::string& when) -> Result<harness::VerifyReport> {
    const fs::path pkg = dir / name;
    if (!patched_package(pkg, "        _adopted(b_pid, orchestrator)\n",
                         "        if req.get(\"kind\") == \"judge\"" + when + ":\n"
                         "            open(" + marker + ", \"w\").close()\n"
                         "            raise RuntimeError(\"zygote: the intermediate process did not exit (test)\")\n")) {
      return error(ErrorCode::internal, "no patched package");
    }
    o.package_dir = pkg.string();
    auto rep = harness::verify(problem.string(), {good.string()}, o);
    EXPECT_TRUE(rep.ok()) << rep.status().to_string();
    if (rep.ok()) {
      EXPECT_EQ(rep->candidates.size(), 1u);
      if (!rep->candidates.empty()) {
        EXPECT_EQ(rep->candidates[0].verdict, Verdict::correct) << rep->candidates[0].message;
      }
    }
    return rep;
  };
  auto once = verify_with("pkg-once", " and not os.path.exists(" + marker + ")");
  ASSERT_TRUE(once.ok());
  EXPECT_EQ(once->worker_start, "zygote");
  EXPECT_EQ(once->judges_started, 2);
  std::string warned;
  for (const std::string& w : once->warnings) warned += w + "\n";
  EXPECT_NE(warned.find("the intermediate process did not exit (test)"), std::string::npos) << warned;
  EXPECT_NE(warned.find("; forked again"), std::string::npos) << warned;
  auto always = verify_with("pkg-always", "");
  ASSERT_TRUE(always.ok());
  EXPECT_EQ(always->judges_started, 3);
  EXPECT_NE(always->worker_start.find("a judge the zygote forked did not greet"), std::string::npos) << always->worker_start;
  EXPECT_NE(always->worker_start.find("the intermediate process did not exit (test)"), std::string::npos) << always->worker_start;
  fs::remove_all(dir);
}

TEST(VerifyJudgePool, AReleasedJudgeServesTheNextCallUnlessItsProblemChangedTorch) {
  // reuse_judges (an eval's problems): a call's judge, released at its end, serves the next call
  // with the same verdicts; a problem that sets torch up otherwise at import gets its judge ended
  // (a warning names the change), and the call after it starts a fresh one.
  const auto [dir, problem, good, bad] = case_files("kernelllm-judge-pool");
  harness::VerifyOptions o = quick_options();
  o.reuse_judges = true;
  EXPECT_EQ(harness::end_kept_judges(), 0);
  auto first = harness::verify(problem.string(), {good.string()}, o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->judges_started, 1);
  EXPECT_EQ(first->judges_reused, 0);
  auto second = harness::verify(problem.string(), {bad.string(), good.string()}, o);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->judges_started, 0);
  EXPECT_EQ(second->judges_reused, 1);
  ASSERT_EQ(second->candidates.size(), 2u);
  EXPECT_EQ(second->candidates[0].verdict, Verdict::wrong_output);
  EXPECT_EQ(second->candidates[1].verdict, Verdict::correct);
  const fs::path sloppy = dir / "sloppy.py";
  {
    std::ifstream in(problem);
    std::ofstream out(sloppy);
    out << in.rdbuf() << "\ntorch.backends.cuda.matmul.allow_tf32 = True\n";
  }
  auto third = harness::verify(sloppy.string(), {good.string()}, o);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ(third->judges_reused, 1);
  std::string warned;
  for (const std::string& w : third->warnings) warned += w + "\n";
  EXPECT_NE(warned.find("not kept for the next problem: "), std::string::npos) << warned;
  EXPECT_NE(warned.find("matmul_tf32: False -> True"), std::string::npos) << warned;
  auto fourth = harness::verify(problem.string(), {good.string()}, o);
  ASSERT_TRUE(fourth.ok()) << fourth.status().to_string();
  EXPECT_EQ(fourth->judges_started, 1);
  EXPECT_EQ(fourth->judges_reused, 0);
  ASSERT_EQ(fourth->candidates.size(), 1u);
  EXPECT_EQ(fourth->candidates[0].verdict, Verdict::correct);
  EXPECT_EQ(harness::end_kept_judges(), 1);
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  fs::remove_all(dir);
}

TEST(VerifyJudgePool, ACallThatEndsWhileItsVariantJudgesStartEndsCleanly) {
  // A candidate right on its first trial starts the size variants' judges (on a thread of their
  // own), then fails a later trial: the call ends while they may still be starting. The end of
  // the call must wait for that thread before it ends (or keeps) any judge (red team: a segfault
  // in start_judge, 6 times in 6, when the judges were taken first).
  const auto [dir, problem, good, bad] = case_files("kernelllm-variants-midway");
  const fs::path late = dir / "late.py";
  {
    std::ifstream in(good);
    std::stringstream text;
    text << in.rdbuf();
    std::string src = text.str();
    const std::string forward = "    def forward(self, ";
    ASSERT_NE(src.find(forward), std::string::npos) << src;
    src += "\n_calls = [0]\n_forward = ModelNew.forward\n\n\ndef _later_wrong(self, *args):\n"
           "    _calls[0] += 1\n    out = _forward(self, *args)\n    return out * 1.5 if _calls[0] > 2 else out\n\n\n"
           "ModelNew.forward = _later_wrong\n";
    std::ofstream(late) << src;
  }
  for (bool reuse : {false, true}) {
    harness::VerifyOptions o = quick_options();
    o.multishape = true;
    o.reuse_judges = reuse;
    for (int k = 0; k < 2; ++k) {
      auto rep = harness::verify(problem.string(), {late.string()}, o);
      ASSERT_TRUE(rep.ok()) << rep.status().to_string();
      ASSERT_EQ(rep->candidates.size(), 1u);
      EXPECT_EQ(rep->candidates[0].verdict, Verdict::wrong_output) << rep->candidates[0].message;
    }
  }
  harness::end_kept_judges();
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  fs::remove_all(dir);
}

TEST(VerifyZygote, AWorkerWhoseIntermediateParentExitedBeforeItRanIsStillForked) {
  // The zygote forks B, B forks the worker C and exits at once. C waits for B's exit to have made
  // it the orchestrator's child; it used to read B's pid with os.getppid() when it first ran, which
  // after B had already exited named the orchestrator, so it waited 10 s for B and gave up (judges
  // then started by exec; CI and an H200 throughput run). Here C sleeps before it reads anything,
  // so B is always gone first: every worker is still forked.
  const auto [dir, problem, good, bad] = case_files("kernelllm-late-c");
  ASSERT_TRUE(patched_package(dir / "pkg", "\n                _leader(", "\n                time.sleep(0.3)"));
  harness::VerifyOptions o = quick_options();
  o.package_dir = (dir / "pkg").string();
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = harness::verify(problem.string(), {good.string()}, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_EQ(rep->candidates.size(), 1u);
  EXPECT_EQ(rep->candidates[0].verdict, Verdict::correct) << rep->candidates[0].message;
  EXPECT_EQ(rep->worker_start, "zygote");
  EXPECT_EQ(rep->judges_started, 1);
  EXPECT_LT(s, 60.0);
  fs::remove_all(dir);
}

TEST(VerifySession, VerifiesEachCandidateAsItIsAdded) {
  harness::VerifyOptions o = quick_options();
  const auto [dir, problem, good, bad] = case_files("kernelllm-feed-test");
  {
    harness::VerifySession session(problem.string(), o, 3);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<size_t, Verdict>> announced;
    ASSERT_TRUE(session.start([&](size_t i, const harness::CandidateResult& r) {
      std::lock_guard lock(mu);
      announced.emplace_back(i, r.verdict);
      cv.notify_all();
    }).ok());
    auto first = session.add(bad.string());
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(*first, 0u);
    {
      // The first one's verdict comes while the second is not even written: verified as it came.
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(240), [&] { return !announced.empty(); }))
          << "no verdict for the first candidate before the second was added";
      EXPECT_EQ(announced.front(), (std::pair<size_t, Verdict>{0, Verdict::wrong_output}));
    }
    auto second = session.add(good.string());
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(*second, 1u);
    auto rep = session.close();
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    ASSERT_EQ(rep->candidates.size(), 2u);  // of the 3 expected
    EXPECT_EQ(rep->candidates[0].verdict, Verdict::wrong_output);
    EXPECT_EQ(rep->candidates[1].verdict, Verdict::correct);
    ASSERT_TRUE(rep->selected.has_value());
    EXPECT_EQ(*rep->selected, 1u);
    EXPECT_EQ(announced.size(), 2u);
    auto late = session.add(good.string());
    ASSERT_FALSE(late.ok());
    EXPECT_NE(late.status().message().find("between start() and close()"), std::string::npos) << late.status().message();
  }
  {
    // Room for the expected count only: one more is a clear error, the others are still verified.
    harness::VerifySession session(problem.string(), o, 1);
    ASSERT_TRUE(session.start().ok());
    ASSERT_TRUE(session.add(good.string()).ok());
    auto extra = session.add(bad.string());
    ASSERT_FALSE(extra.ok());
    EXPECT_NE(extra.status().message().find("at most 1 candidates"), std::string::npos) << extra.status().message();
    auto rep = session.close();
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    ASSERT_EQ(rep->candidates.size(), 1u);
    EXPECT_EQ(rep->candidates[0].verdict, Verdict::correct);
  }
  {
    harness::VerifySession session(problem.string(), o, 2);  // started, then nothing came
    ASSERT_TRUE(session.start().ok());
    auto rep = session.close();
    ASSERT_FALSE(rep.ok());
    EXPECT_NE(rep.status().message().find("at least one candidate"), std::string::npos) << rep.status().message();
  }
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  fs::remove_all(dir);
}

TEST(VerifySession, ACorrectCandidateIsCheckedOnOtherSizesBeforeTheNextArrives) {
  // The multi-shape check runs on the candidate's worker thread right after its own verdict: the
  // result announced for it carries the check, while the session still waits for more.
  harness::VerifyOptions o = quick_options();
  o.multishape = true;
  const auto [dir, problem, good, bad] = case_files("kernelllm-feed-shapes-test");
  {
    harness::VerifySession session(problem.string(), o, 2);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<harness::CandidateResult> announced;
    ASSERT_TRUE(session.start([&](size_t, const harness::CandidateResult& r) {
      std::lock_guard lock(mu);
      announced.push_back(r);
      cv.notify_all();
    }).ok());
    ASSERT_TRUE(session.add(good.string()).ok());
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(240), [&] { return !announced.empty(); }))
          << "no verdict for the first candidate before the second was added";
      const harness::CandidateResult& r = announced.front();
      EXPECT_EQ(r.verdict, Verdict::correct) << r.message;
      ASSERT_TRUE(r.multishape.has_value()) << "announced without its multi-shape check: " << r.multishape_note;
      EXPECT_EQ(r.multishape->verdict, harness::ShapeVerdict::pass);
      EXPECT_EQ(r.multishape->variants.size(), harness::default_shape_variants().size());
      EXPECT_TRUE(r.evidence["phases"].contains("multishape_ms"));
    }
    ASSERT_TRUE(session.add(bad.string()).ok());
    auto rep = session.close();
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    ASSERT_EQ(rep->candidates.size(), 2u);
    EXPECT_TRUE(rep->candidates[0].multishape.has_value());
    EXPECT_EQ(rep->candidates[1].verdict, Verdict::wrong_output);
    EXPECT_FALSE(rep->candidates[1].multishape.has_value());
    EXPECT_EQ(rep->candidates[1].multishape_note, "not run: the main verdict is not correct");
    // The call's timeline: set-up, then every candidate, then the end.
    for (const char* k : {"setup", "candidates", "total"}) ASSERT_TRUE(rep->timeline_ms.contains(k)) << k;
    EXPECT_LE(rep->timeline_ms["setup"].get<double>(), rep->timeline_ms["candidates"].get<double>());
    EXPECT_LE(rep->timeline_ms["candidates"].get<double>(), rep->timeline_ms["total"].get<double>());
  }
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kernelllm
