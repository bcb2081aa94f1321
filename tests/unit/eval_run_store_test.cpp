// The eval run store: config checks on reopen, problem-set checks, samples written once,
// verdicts committed once with their verifications log, incomplete-run errors, and the rules
// of merging shard stores.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernelllm/eval/run_store.h"

namespace kernelllm::eval {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("kernelllm-run-store-" + std::to_string(rd()));
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

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Json config(const std::string& shard = "0/1") {
  return Json{{"problems", "/p"}, {"profiles", {"strict"}}, {"shard", shard}, {"verifier", {{"trials", 5}, {"sandbox", true}}}};
}

Problem problem(const std::string& id, int position) { return Problem{id, 0, id, fs::path("/p") / (id + ".py"), position}; }

StoredVerdict verdict(const std::string& p, int sample, const std::string& profile, const std::string& v) {
  return StoredVerdict{p, sample, profile, v, "", v == "correct" ? "5 trial(s) match" : "bad", std::nullopt, Json{{"verdict", v}}};
}

TEST(RunStore, ReopenWithOtherOptionsNamesTheKey) {
  TempDir d;
  {
    auto s = RunStore::open_or_create(d.path() / "run", config());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
  }
  EXPECT_TRUE(RunStore::open_or_create(d.path() / "run", config()).ok());
  Json other = config();
  other["verifier"]["trials"] = 3;
  auto r = RunStore::open_or_create(d.path() / "run", other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("verifier.trials: the run has 5, the options give 3"), std::string::npos)
      << r.status().message();
  auto shard = RunStore::open_or_create(d.path() / "run", config("1/2"));
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("shard"), std::string::npos);
  EXPECT_FALSE(RunStore::open_existing(d.path() / "none").ok());
}

TEST(RunStore, ReopenMayReachTheEndpointElsewhereButNotAnotherModel) {
  TempDir d;
  Json c = config();
  c["endpoint"] = {{"url", "http://127.0.0.1:8000/v1"}, {"model", "m"}, {"prompt", "chat"}};
  ASSERT_TRUE(RunStore::open_or_create(d.path() / "run", c).ok());
  {
    Json moved = c;
    moved["endpoint"]["url"] = "http://127.0.0.1:9000/v1";
    auto s = RunStore::open_or_create(d.path() / "run", moved);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->config()["endpoint"]["url"], "http://127.0.0.1:8000/v1");  // as recorded
  }
  Json other = c;
  other["endpoint"]["model"] = "m2";
  auto r = RunStore::open_or_create(d.path() / "run", other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("endpoint.model"), std::string::npos) << r.status().message();
}

TEST(RunStore, ASecondWriterOfTheSameRunIsRefusedUntilTheFirstCloses) {
  TempDir d;
  {
    auto first = RunStore::open_or_create(d.path() / "run", config());
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    auto second = RunStore::open_or_create(d.path() / "run", config());
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("in use by another kernelllm process (pid " + std::to_string(::getpid()) + ")"),
              std::string::npos)
        << second.status().message();
    RunStore moved = std::move(*first);  // the lock moves with the store
    EXPECT_FALSE(RunStore::open_or_create(d.path() / "run", config()).ok());
    EXPECT_TRUE(RunStore::open_existing(d.path() / "run").ok());  // readers (report, merge) are not writers
  }
  EXPECT_TRUE(RunStore::open_or_create(d.path() / "run", config()).ok());
}

TEST(RunStore, ConfigDifferenceIgnoresListedKeys) {
  EXPECT_FALSE(config_difference(config("0/2"), config("1/2"), {"shard"}).has_value());
  EXPECT_TRUE(config_difference(config("0/2"), config("1/2")).has_value());
  Json extra = config();
  extra["k"] = 20;
  auto diff = config_difference(config(), extra);
  ASSERT_TRUE(diff.has_value());
  EXPECT_EQ(*diff, "k: the run has nothing, the options give 20");
}

TEST(RunStore, ProblemSetMustStayTheSameOnRestart) {
  TempDir d;
  auto s = RunStore::open_or_create(d.path(), config());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->set_problems({problem("add", 0), problem("relu", 1)}).ok());
  EXPECT_TRUE(s->set_problems({problem("add", 0), problem("relu", 1)}).ok());
  auto changed = s->set_problems({problem("add", 0), problem("relu", 1), problem("softmax", 2)});
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.message().find("softmax"), std::string::npos) << changed.message();
  auto ps = s->problems();
  ASSERT_TRUE(ps.ok());
  ASSERT_EQ(ps->size(), 2u);
  EXPECT_EQ((*ps)[1].id, "relu");
  EXPECT_EQ((*ps)[1].file, fs::path("/p/relu.py"));
}

TEST(RunStore, SamplesAreWrittenOnceWithTheirFiles) {
  TempDir d;
  auto s = RunStore::open_or_create(d.path(), config());
  ASSERT_TRUE(s.ok());
  Problem p{"level1/19_ReLU", 1, "19_ReLU", "/kb/level1/19_ReLU.py", 0};
  ASSERT_TRUE(s->set_problems({p}).ok());
  auto none = s->samples(p.id);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(s->add_samples(p, {NewSample{"code0\n", "```\ncode0\n```", "generated", "fenced block 1"},
                                 NewSample{"code1\n", "", "/c/1.py", ""}})
                  .ok());
  auto samples = s->samples(p.id);
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].candidate_file, "candidates/level1/19_ReLU/0.py");
  EXPECT_EQ((*samples)[0].completion_file, "candidates/level1/19_ReLU/0.completion.txt");
  EXPECT_EQ((*samples)[1].completion_file, "");
  EXPECT_EQ((*samples)[1].origin, "/c/1.py");
  EXPECT_EQ(slurp(d.path() / (*samples)[0].candidate_file), "code0\n");
  EXPECT_EQ(slurp(d.path() / (*samples)[0].completion_file), "```\ncode0\n```");
  EXPECT_EQ((*samples)[0].sha256.size(), 64u);
  EXPECT_FALSE(s->add_samples(p, {NewSample{"again", "", "x", ""}}).ok());
  EXPECT_FALSE(s->add_samples(problem("other", 1), {NewSample{"x", "", "x", ""}}).ok());
}

TEST(RunStore, VerdictsCommitOnceAndOutcomesNeedEveryVerdict) {
  TempDir d;
  Json c = config();
  c["profiles"] = {"strict", "kernelbench"};
  {
    auto s = RunStore::open_or_create(d.path(), c);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->set_problems({problem("add", 0)}).ok());
    ASSERT_TRUE(s->add_samples(problem("add", 0), {NewSample{"a", "", "0.py", ""}, NewSample{"b", "", "1.py", ""}}).ok());
    ASSERT_TRUE(s->put_verdict(verdict("add", 0, "strict", "correct"), false).ok());
    ASSERT_TRUE(s->put_verdict(verdict("add", 1, "strict", "wrong_output"), true).ok());
    EXPECT_FALSE(s->put_verdict(verdict("add", 1, "strict", "correct"), false).ok());  // committed once
    auto incomplete = s->outcomes({"strict", "kernelbench"});
    ASSERT_FALSE(incomplete.ok());
    EXPECT_NE(incomplete.status().message().find("add sample 0 has no kernelbench verdict"), std::string::npos)
        << incomplete.status().message();
  }
  // A restart (new handle) sees what was committed and adds the rest.
  auto s = RunStore::open_or_create(d.path(), c);
  ASSERT_TRUE(s.ok());
  auto count = s->verdict_count();
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 2);
  StoredVerdict fast = verdict("add", 0, "kernelbench", "correct");
  fast.speedup = 1.5;
  ASSERT_TRUE(s->put_verdict(fast, false).ok());
  ASSERT_TRUE(s->put_verdict(verdict("add", 1, "kernelbench", "correct"), std::nullopt).ok());
  auto log = s->verifications();
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 3u);  // the nullopt one is not logged
  EXPECT_EQ((*log)[1].sample, 1);
  EXPECT_TRUE((*log)[1].cached);
  EXPECT_EQ((*log)[1].verdict, "wrong_output");

  auto out = s->outcomes({"strict", "kernelbench"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 1u);
  const ProblemOutcome& po = (*out)[0];
  EXPECT_EQ(po.problem_file, "/p/add.py");
  ASSERT_EQ(po.samples.at("strict").size(), 2u);
  EXPECT_TRUE(po.samples.at("strict")[0].correct);
  EXPECT_FALSE(po.samples.at("strict")[1].correct);
  EXPECT_EQ(po.samples.at("strict")[1].candidate_file, "candidates/add/1.py");
  EXPECT_EQ(po.samples.at("kernelbench")[0].speedup, std::optional<double>(1.5));
  EXPECT_FALSE(po.samples.at("kernelbench")[1].speedup.has_value());
}

// Makes a shard store holding `problems` (id, position), each with one sample "code of <id>"
// and a strict verdict.
void make_shard(const fs::path& dir, const std::string& shard, const std::vector<Problem>& problems,
                const std::string& v = "correct", const Json& endpoint = nullptr) {
  Json c = config(shard);
  if (!endpoint.is_null()) c["endpoint"] = endpoint;
  auto s = RunStore::open_or_create(dir, c);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->set_problems(problems).ok());
  for (const Problem& p : problems) {
    ASSERT_TRUE(s->add_samples(p, {NewSample{"code of " + p.id, "", "0.py", ""}}).ok());
    ASSERT_TRUE(s->put_verdict(verdict(p.id, 0, "strict", v), false).ok());
  }
}

TEST(RunStoreMerge, DisjointShardsMergeInProblemOrderWithFiles) {
  TempDir d;
  make_shard(d.path() / "a", "0/2", {problem("p0", 0), problem("p2", 2)});
  make_shard(d.path() / "b", "1/2", {problem("p1", 1)});
  ASSERT_TRUE(merge_run_stores({d.path() / "b", d.path() / "a"}, d.path() / "m").ok());
  auto m = RunStore::open_existing(d.path() / "m");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->config()["shard"], "0/1");
  auto ps = m->problems();
  ASSERT_TRUE(ps.ok());
  ASSERT_EQ(ps->size(), 3u);
  EXPECT_EQ((*ps)[0].id, "p0");
  EXPECT_EQ((*ps)[1].id, "p1");
  EXPECT_EQ((*ps)[2].id, "p2");
  EXPECT_EQ(slurp(d.path() / "m/candidates/p1/0.py"), "code of p1");
  auto log = m->verifications();
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->size(), 3u);  // each shard's log is carried over
  auto out = m->outcomes({"strict"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->size(), 3u);
  // The output must be new.
  auto again = merge_run_stores({d.path() / "a"}, d.path() / "m");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("already holds a run store"), std::string::npos);
}

TEST(RunStoreMerge, IdenticalDuplicatesMergeDifferingOnesDoNot) {
  TempDir d;
  make_shard(d.path() / "a", "0/2", {problem("p0", 0)});
  make_shard(d.path() / "b", "1/2", {problem("p0", 0)});
  make_shard(d.path() / "c", "1/2", {problem("p0", 0)}, "wrong_output");
  EXPECT_TRUE(merge_run_stores({d.path() / "a", d.path() / "b"}, d.path() / "ab").ok());
  auto diff = merge_run_stores({d.path() / "a", d.path() / "c"}, d.path() / "ac");
  ASSERT_FALSE(diff.ok());
  EXPECT_NE(diff.message().find("problem p0 is in both"), std::string::npos) << diff.message();
  EXPECT_NE(diff.message().find("different verdicts"), std::string::npos) << diff.message();
}

TEST(RunStoreMerge, ShardsMayReachTheirEndpointsAtDifferentUrls) {
  TempDir d;
  const Json a{{"url", "http://127.0.0.1:8000/v1"}, {"model", "m"}, {"prompt", "kernelllm"}};
  Json b = a;
  b["url"] = "http://127.0.0.1:8001/v1";
  make_shard(d.path() / "a", "0/2", {problem("p0", 0)}, "correct", a);
  make_shard(d.path() / "b", "1/2", {problem("p1", 1)}, "correct", b);
  Status merged = merge_run_stores({d.path() / "a", d.path() / "b"}, d.path() / "m");
  ASSERT_TRUE(merged.ok()) << merged.to_string();
  Json other = a;
  other["model"] = "m2";
  make_shard(d.path() / "c", "1/2", {problem("p1", 1)}, "correct", other);
  Status refused = merge_run_stores({d.path() / "a", d.path() / "c"}, d.path() / "n");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("endpoint.model"), std::string::npos) << refused.message();
}

TEST(RunStoreMerge, ConfigsMustAgreeApartFromTheShard) {
  TempDir d;
  make_shard(d.path() / "a", "0/2", {problem("p0", 0)});
  {
    Json other = config("1/2");
    other["verifier"]["sandbox"] = false;
    auto s = RunStore::open_or_create(d.path() / "b", other);
    ASSERT_TRUE(s.ok());
  }
  auto r = merge_run_stores({d.path() / "a", d.path() / "b"}, d.path() / "m");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("verifier.sandbox"), std::string::npos) << r.message();
  EXPECT_FALSE(fs::exists(d.path() / "m" / "run.sqlite"));
}

}  // namespace
}  // namespace kernelllm::eval
