// Problem discovery for `kernelllm eval`: KernelBench-like roots and plain directories in temp
// dirs, numeric-prefix order, levels, shards, candidate directories and their errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernelllm/eval/kernelbench.h"
#include "kernelllm/eval/problems.h"

namespace kernelllm::eval {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("kernelllm-eval-problems-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void touch(const std::string& rel) const {
    fs::create_directories((path_ / rel).parent_path());
    std::ofstream(path_ / rel) << "# " << rel << "\n";
  }

 private:
  fs::path path_;
};

std::vector<std::string> ids(const std::vector<Problem>& ps) {
  std::vector<std::string> out;
  for (const Problem& p : ps) out.push_back(p.id);
  return out;
}

TEST(EvalProblems, NameOrderIsNumericPrefixThenName) {
  EXPECT_TRUE(problem_name_less("2_b.py", "10_a.py"));
  EXPECT_FALSE(problem_name_less("10_a.py", "2_b.py"));
  EXPECT_TRUE(problem_name_less("3_a.py", "3_b.py"));
  EXPECT_TRUE(problem_name_less("99_x.py", "add.py"));  // numbered names first
  EXPECT_TRUE(problem_name_less("add.py", "relu.py"));
}

TEST(EvalProblems, KernelBenchRootSelectsLevelsInOrder) {
  TempDir d;
  for (const char* f : {"level1/10_Conv.py", "level1/2_Add.py", "level1/19_ReLU.py", "level1/__init__.py",
                        "level2/1_Fused.py", "level3/1_MLP.py"}) {
    d.touch(f);
  }
  ASSERT_TRUE(is_kernelbench_root(d.path()));
  auto one = discover_problems(d.path(), std::nullopt);  // default level 1
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(ids(*one), (std::vector<std::string>{"level1/2_Add", "level1/10_Conv", "level1/19_ReLU"}));
  EXPECT_EQ((*one)[2].stem, "19_ReLU");
  EXPECT_EQ((*one)[2].level, 1);
  EXPECT_EQ((*one)[2].position, 2);
  EXPECT_TRUE((*one)[0].file.is_absolute());

  auto two = discover_problems(d.path(), std::vector<int>{2, 1});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(ids(*two), (std::vector<std::string>{"level2/1_Fused", "level1/2_Add", "level1/10_Conv", "level1/19_ReLU"}));
  EXPECT_EQ((*two)[3].position, 3);
}

TEST(EvalProblems, MissingLevelDirectoryIsNamed) {
  TempDir d;
  d.touch("level1/1_A.py");
  auto r = discover_problems(d.path(), std::vector<int>{1, 4});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("level4/"), std::string::npos) << r.status().message();
}

TEST(EvalProblems, PlainDirectoryUsesStemsAndRejectsLevels) {
  TempDir d;
  for (const char* f : {"softmax.py", "add.py", "12_relu.py", "_helper.py", "notes.txt"}) d.touch(f);
  fs::create_directories(d.path() / "sub");
  auto r = discover_problems(d.path(), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(ids(*r), (std::vector<std::string>{"12_relu", "add", "softmax"}));
  EXPECT_EQ((*r)[1].level, 0);
  auto with_levels = discover_problems(d.path(), std::vector<int>{1});
  ASSERT_FALSE(with_levels.ok());
  EXPECT_NE(with_levels.status().message().find("--levels"), std::string::npos);
}

TEST(EvalProblems, MissingOrEmptyDirectoriesAreErrors) {
  TempDir d;
  auto missing = discover_problems(d.path() / "nope", std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  EXPECT_NE(missing.status().message().find("found nothing"), std::string::npos) << missing.status().message();

  d.touch("readme.md");
  auto empty = discover_problems(d.path(), std::nullopt);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("found none"), std::string::npos);

  d.touch("level1/readme.md");
  auto empty_level = discover_problems(d.path(), std::nullopt);
  ASSERT_FALSE(empty_level.ok());
}

TEST(EvalProblems, LevelsAndShardsParse) {
  auto l = parse_levels("1,2,3");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<int>{1, 2, 3}));
  for (const char* bad : {"", "0", "1,,2", "1,a", "1,1", "-1", "2 "}) EXPECT_FALSE(parse_levels(bad).ok()) << bad;

  auto s = parse_shard("2/5");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 5);
  EXPECT_EQ(s->to_string(), "2/5");
  for (const char* bad : {"5/5", "1", "/2", "1/0", "-1/2", "a/b", "1/2/3"}) EXPECT_FALSE(parse_shard(bad).ok()) << bad;
}

TEST(EvalProblems, ShardTakesEveryNthProblemAndShardsPartitionTheSet) {
  std::vector<Problem> all;
  for (int i = 0; i < 7; ++i) {
    Problem p;
    p.id = std::string(1, 'p').append(std::to_string(i));
    p.position = i;
    all.push_back(p);
  }
  EXPECT_EQ(ids(select_shard(all, Shard{1, 3})), (std::vector<std::string>{"p1", "p4"}));
  size_t total = 0;
  for (int i = 0; i < 3; ++i) total += select_shard(all, Shard{i, 3}).size();
  EXPECT_EQ(total, all.size());
  EXPECT_EQ(select_shard(all, Shard{0, 1}).size(), all.size());
}

TEST(EvalProblems, CandidateFilesAreNumericAndPreferTheIdDirectory) {
  TempDir d;
  for (const char* f : {"19_ReLU/10.py", "19_ReLU/2.py", "19_ReLU/0.py", "19_ReLU/0.completion.txt"}) d.touch(f);
  Problem p{"level1/19_ReLU", 1, "19_ReLU", {}, 0};
  auto files = candidate_files(d.path(), p);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].filename(), "0.py");
  EXPECT_EQ((*files)[1].filename(), "2.py");
  EXPECT_EQ((*files)[2].filename(), "10.py");

  d.touch("level1/19_ReLU/5.py");  // DIR/<id>/ wins over DIR/<stem>/
  auto by_id = candidate_files(d.path(), p);
  ASSERT_TRUE(by_id.ok());
  ASSERT_EQ(by_id->size(), 1u);
  EXPECT_EQ((*by_id)[0].filename(), "5.py");
}

TEST(EvalProblems, CandidateDirectoryErrors) {
  TempDir d;
  Problem p{"add", 0, "add", {}, 0};
  auto missing = candidate_files(d.path(), p);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);

  fs::create_directories(d.path() / "add");
  EXPECT_FALSE(candidate_files(d.path(), p).ok());  // no .py file

  d.touch("add/sample_a.py");
  auto named = candidate_files(d.path(), p);
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("sample_a.py"), std::string::npos);

  fs::remove(d.path() / "add/sample_a.py");
  d.touch("add/1.py");
  d.touch("add/01.py");
  auto dup = candidate_files(d.path(), p);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("sample 1"), std::string::npos) << dup.status().message();
}

TEST(EvalProblems, KernelBenchSampleNamesParseOnlyInTheirExactForm) {
  auto n = parse_kernelbench_sample_name("level_2_problem_19_sample_3_kernel.py");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->level, 2);
  EXPECT_EQ(n->problem, 19);
  EXPECT_EQ(n->sample, 3);
  for (const char* bad : {"level_1_problem_1_sample_0_prompt.txt", "level_1_problem_1_sample_0_kernel.pyc",
                          "level_1_problem__sample_0_kernel.py", "level_x_problem_1_sample_0_kernel.py", "0.py",
                          "level_1_problem_1_sample_0_kernel.py.bak"}) {
    EXPECT_FALSE(parse_kernelbench_sample_name(bad).has_value()) << bad;
  }
}

TEST(EvalProblems, KernelBenchRunDirectoryMapsSamplesByLevelAndProblemNumber) {
  TempDir kb, run;
  for (const char* f : {"level1/1_ReLU.py", "level1/19_Sum.py", "level2/1_Fused.py"}) kb.touch(f);
  for (const char* f : {"level_1_problem_1_sample_10_kernel.py", "level_1_problem_1_sample_2_kernel.py",
                        "level_1_problem_1_sample_0_prompt.txt", "level_2_problem_1_sample_0_kernel.py"}) {
    run.touch(f);
  }
  ASSERT_TRUE(is_kernelbench_run_dir(run.path()));
  EXPECT_FALSE(is_kernelbench_run_dir(kb.path()));
  auto problems = discover_problems(kb.path(), std::vector<int>{1, 2});
  ASSERT_TRUE(problems.ok()) << problems.status().to_string();
  ASSERT_EQ(ids(*problems), (std::vector<std::string>{"level1/1_ReLU", "level1/19_Sum", "level2/1_Fused"}));
  auto relu = candidate_files(run.path(), (*problems)[0]);
  ASSERT_TRUE(relu.ok()) << relu.status().to_string();
  ASSERT_EQ(relu->size(), 2u);  // samples 2 then 10, numerically; the prompt file is not a sample
  EXPECT_EQ((*relu)[0].filename(), "level_1_problem_1_sample_2_kernel.py");
  EXPECT_EQ((*relu)[1].filename(), "level_1_problem_1_sample_10_kernel.py");
  auto fused = candidate_files(run.path(), (*problems)[2]);
  ASSERT_TRUE(fused.ok()) << fused.status().to_string();
  EXPECT_EQ(fused->at(0).filename(), "level_2_problem_1_sample_0_kernel.py");
  auto sum = candidate_files(run.path(), (*problems)[1]);
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.status().message().find("level_1_problem_19_sample_<K>_kernel.py"), std::string::npos)
      << sum.status().message();

  // A plain problem directory has no level: samples of two levels for one number are ambiguous.
  TempDir plain;
  plain.touch("1_ReLU.py");
  plain.touch("relu.py");
  auto plain_problems = discover_problems(plain.path(), std::nullopt);
  ASSERT_TRUE(plain_problems.ok());
  auto ambiguous = candidate_files(run.path(), (*plain_problems)[0]);
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.status().message().find("levels 1 and 2"), std::string::npos) << ambiguous.status().message();
  auto unnumbered = candidate_files(run.path(), (*plain_problems)[1]);
  ASSERT_FALSE(unnumbered.ok());
  EXPECT_NE(unnumbered.status().message().find("<number>_<name>.py"), std::string::npos) << unnumbered.status().message();
}

}  // namespace
}  // namespace kernelllm::eval
