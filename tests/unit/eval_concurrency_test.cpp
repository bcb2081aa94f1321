// How many problems `kernelllm eval` verifies at once and with how many candidate workers each
// (eval_concurrency): chosen when not given, bounded by the cores when it is.
#include <gtest/gtest.h>

#include "kernelllm/eval/eval.h"

namespace kernelllm::eval {
namespace {

EvalOptions with_candidates(std::vector<std::string> devices) {
  EvalOptions o;
  o.candidates = "samples";
  o.verify.devices = std::move(devices);
  return o;
}

TEST(EvalConcurrency, PreGeneratedSamplesOnGpusVerifyHalfTheCoresOfProblemsAtOnce) {
  const EvalConcurrency one = eval_concurrency(with_candidates({"cuda:0"}), 16, 100);
  EXPECT_EQ(one.problem_jobs, 8);
  EXPECT_EQ(one.jobs, 2);  // 8 problems x 2 workers: the cores, not 8 x min(16, samples)
  const EvalConcurrency two = eval_concurrency(with_candidates({"cuda:0", "cuda:1"}), 32, 100);
  EXPECT_EQ(two.problem_jobs, 16);
  EXPECT_EQ(two.jobs, 2);
  EXPECT_EQ(eval_concurrency(with_candidates({"cuda"}), 16, 3).problem_jobs, 3);  // no more than the problems
  EXPECT_EQ(eval_concurrency(with_candidates({"cuda"}), 16, 3).jobs, 5);
  EvalOptions endpoint;
  endpoint.endpoint = EndpointOptions{};
  endpoint.verify.devices = {"cuda:0"};
  EXPECT_EQ(eval_concurrency(endpoint, 16, 100).problem_jobs, 8);
}

TEST(EvalConcurrency, OneProblemAtATimeOnTheCpuWithALocalModelOrOneCore) {
  const EvalConcurrency cpu = eval_concurrency(with_candidates({"cpu"}), 16, 100);
  EXPECT_EQ(cpu.problem_jobs, 1);
  EXPECT_EQ(cpu.jobs, 0);  // the verifier's own default
  EvalOptions model;
  model.verify.devices = {"cuda:0"};
  EXPECT_EQ(eval_concurrency(model, 16, 100).problem_jobs, 1);
  EXPECT_EQ(eval_concurrency(with_candidates({"cuda:0"}), 1, 100).problem_jobs, 1);
  EXPECT_EQ(eval_concurrency(with_candidates({"cuda:0", "cpu"}), 16, 100).problem_jobs, 1);
}

TEST(EvalConcurrency, GivenValuesStandAndWorkersShareTheCoresOnlyWhenNotGiven) {
  EvalOptions o = with_candidates({"cpu"});
  o.problem_jobs = 4;
  EXPECT_EQ(eval_concurrency(o, 16, 100).problem_jobs, 4);
  EXPECT_EQ(eval_concurrency(o, 16, 100).jobs, 4);
  EXPECT_EQ(eval_concurrency(o, 2, 100).jobs, 1);  // at least one
  o.verify.jobs = 6;
  EXPECT_EQ(eval_concurrency(o, 16, 100).jobs, 6);
  o.problem_jobs = 1;
  o.verify.jobs = 0;
  EXPECT_EQ(eval_concurrency(o, 16, 100).jobs, 0);
}

TEST(EvalConcurrency, ProblemsWithTheMostSamplesStartFirstWhenSeveralRunAtOnce) {
  const std::vector<size_t> work{1, 3, 2, 3, 1};
  EXPECT_EQ(problem_start_order(work, 8), (std::vector<size_t>{1, 3, 2, 0, 4}));  // ties in their own order
  EXPECT_EQ(problem_start_order(work, 1), (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(problem_start_order({}, 4).empty());
}

}  // namespace
}  // namespace kernelllm::eval
