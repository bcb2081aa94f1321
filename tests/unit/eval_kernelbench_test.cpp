// KernelBench's eval_results.json from a run store made by hand: numeric key order, sample ids
// from KernelBench file names, runtime and runtime_stats from a GPU timing (which CPU tests
// cannot produce), and the errors for a profile or level the run lacks; plus the absolute
// times the store's outcomes carry.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernelllm/eval/kernelbench.h"
#include "kernelllm/eval/run_store.h"

namespace kernelllm::eval {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("kernelllm-eval-kb-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A run of level 1 problems 2_Add and 10_Conv (kernelbench profile): 10_Conv's two samples came
// from a KernelBench run as samples 4 and 7; sample 0 of 2_Add is correct and timed on a GPU.
fs::path make_run(const fs::path& dir) {
  Json config{{"problems", "/kb"}, {"profiles", {"kernelbench"}}, {"shard", "0/1"}};
  auto store = RunStore::open_or_create(dir, config);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  std::vector<Problem> problems = {Problem{"level1/2_Add", 1, "2_Add", "/kb/level1/2_Add.py", 0},
                                   Problem{"level1/10_Conv", 1, "10_Conv", "/kb/level1/10_Conv.py", 1}};
  EXPECT_TRUE(store->set_problems(problems).ok());
  EXPECT_TRUE(store->add_samples(problems[0], {NewSample{"a", "", "/cands/2_Add/0.py", ""}}).ok());
  EXPECT_TRUE(store->add_samples(problems[1], {NewSample{"b", "", "/r/level_1_problem_10_sample_4_kernel.py", ""},
                                               NewSample{"c", "", "/r/level_1_problem_10_sample_7_kernel.py", ""}})
                  .ok());
  Json timed{{"device", "cuda:0"},
             {"timing", {{"meaningful", true}, {"median_ms", 2.0}, {"times_ms", {1.0, 2.0, 3.0}}}},
             {"speedup", 1.5}};
  EXPECT_TRUE(store->put_verdict(StoredVerdict{"level1/2_Add", 0, "kernelbench", "correct", "", "ok", 1.5, timed}, false).ok());
  EXPECT_TRUE(store
                  ->put_verdict(StoredVerdict{"level1/10_Conv", 0, "kernelbench", "compile_error", "syntax",
                                              "SyntaxError: bad", std::nullopt, Json{{"device", "cuda:0"}}},
                                false)
                  .ok());
  return dir;
}

TEST(EvalKernelBench, ExportFollowsKernelBenchLayout) {
  TempDir d;
  fs::path run = make_run(d.path() / "run");
  int missing = -1;
  auto text = kernelbench_eval_results(run, "kernelbench", std::nullopt, &missing);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(missing, 1);  // 10_Conv's second sample has no verdict yet
  EXPECT_LT(text->find("\"2\""), text->find("\"10\""));  // numeric order, as KernelBench writes it
  Json j = Json::parse(*text);
  const Json& add = j["2"][0];
  EXPECT_EQ(add["sample_id"], 0);
  EXPECT_EQ(add["compiled"], true);
  EXPECT_EQ(add["correctness"], true);
  EXPECT_DOUBLE_EQ(add["runtime"].get<double>(), 2.0);  // the mean of the timed calls
  EXPECT_DOUBLE_EQ(add["runtime_stats"]["min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(add["runtime_stats"]["max"].get<double>(), 3.0);
  EXPECT_NEAR(add["runtime_stats"]["std"].get<double>(), 0.8165, 1e-4);
  EXPECT_EQ(add["runtime_stats"]["num_trials"], 3);
  EXPECT_DOUBLE_EQ(add["metadata"]["kernelllm_reference_median_ms"].get<double>(), 3.0);
  const Json& conv = j["10"][0];
  EXPECT_EQ(conv["sample_id"], 4);  // K of the KernelBench file it was copied from
  EXPECT_EQ(conv["compiled"], false);
  EXPECT_EQ(conv["correctness"], false);
  EXPECT_DOUBLE_EQ(conv["runtime"].get<double>(), -1.0);
  EXPECT_TRUE(conv["runtime_stats"].empty());
  EXPECT_EQ(conv["metadata"]["compilation_error"], "SyntaxError: bad");
  EXPECT_EQ(j["10"].size(), 1u);
}

TEST(EvalKernelBench, ExportRejectsAProfileOrLevelTheRunLacks) {
  TempDir d;
  fs::path run = make_run(d.path() / "run");
  auto strict = kernelbench_eval_results(run, "strict", std::nullopt, nullptr);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("--profile strict"), std::string::npos) << strict.status().message();
  auto level = kernelbench_eval_results(run, "kernelbench", 2, nullptr);
  ASSERT_FALSE(level.ok());
  EXPECT_NE(level.status().message().find("--level 2"), std::string::npos) << level.status().message();
}

TEST(EvalKernelBench, OutcomesCarryTheAbsoluteTimesBehindTheSpeedup) {
  TempDir d;
  fs::path run = make_run(d.path() / "run");
  auto store = RunStore::open_existing(run);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->put_verdict(StoredVerdict{"level1/10_Conv", 1, "kernelbench", "wrong_output", "", "mismatch",
                                               std::nullopt, Json::object()},
                                 false)
                  .ok());
  auto outcomes = store->outcomes({"kernelbench"});
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().to_string();
  const SampleOutcome& add = (*outcomes)[0].samples.at("kernelbench")[0];
  ASSERT_TRUE(add.candidate_ms && add.reference_ms);
  EXPECT_DOUBLE_EQ(*add.candidate_ms, 2.0);
  EXPECT_DOUBLE_EQ(*add.reference_ms, 3.0);
  EXPECT_FALSE((*outcomes)[1].samples.at("kernelbench")[0].candidate_ms.has_value());
}

}  // namespace
}  // namespace kernelllm::eval
