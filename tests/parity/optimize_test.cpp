// optimize() end to end on CPU (Triton interpreter in the verifier's workers) with fixed
// completions that wrap tests/cases/add candidates in fences and prose: real verdicts, the
// chosen candidate, failure reasons, refinement prompts; and open_engine / make_engine_source
// on the tiny test model (KERNELLLM_TESTDATA) against a direct generate() call.
#include "kernelllm/pipeline/optimize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernelllm/base/file.h"
#include "kernelllm/engine/cuda_backend.h"
#include "kernelllm/engine/model.h"
#include "parity/verify_support.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;
using harness::Verdict;
using test_support::kCases;
using test_support::kCorrect;
using test_support::kProblem;
using test_support::kWrong;
using test_support::no_children_within;
using test_support::live_children;

std::string read(const fs::path& p) {
  auto r = read_text_file(p);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

// Replies to each complete() call with the next list of texts; records what it was asked.
class FixedSource final : public CompletionSource {
 public:
  explicit FixedSource(std::deque<std::vector<std::string>> replies) : replies_(std::move(replies)) {}

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int, const SamplingParams& sampling,
                                            const StreamCallback&, GenerateStats*) override {
    prompts.push_back(prompt);
    counts.push_back(n);
    seeds.push_back(sampling.seed);
    if (replies_.empty()) return error(ErrorCode::out_of_range, "FixedSource: no replies left");
    std::vector<std::string> r = std::move(replies_.front());
    replies_.pop_front();
    if (static_cast<int>(r.size()) != n) {
      return error(ErrorCode::invalid_argument, "FixedSource: asked for " + std::to_string(n) + " completions, holds " +
                                                    std::to_string(r.size()));
    }
    return r;
  }
  std::string describe() const override { return "fixed"; }

  std::vector<std::string> prompts;
  std::vector<int> counts;
  std::vector<uint64_t> seeds;

 private:
  std::deque<std::vector<std::string>> replies_;
};

const std::string kNotPython = "I am not sure what you mean. Here are some thoughts on kernels and the weather.";

std::string fenced_with_prose(const std::string& code) {
  return "Sure! First the imports are needed.\n```python\nimport torch\n```\nHere is the full module:\n```python\n" + code +
         "```\nThis launches one program per 1024 elements.";
}

class OptimizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    work = fs::temp_directory_path() / ("kernelllm-optimize-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(work);
    options.k = 3;
    options.max_new_tokens = 64;
    options.sampling.seed = 1234;
    options.work_dir = work;
    options.verify.use_cache = false;
    options.verify.multishape = false;
    options.verify.n_trials = 2;
    options.verify.warmup = 1;
    options.verify.iters = 3;
  }
  void TearDown() override { fs::remove_all(work); }

  fs::path work;
  OptimizeOptions options;
};

TEST_F(OptimizeTest, PicksTheCorrectCandidateAmongWrongAndNonPython) {
  ASSERT_FALSE(kCorrect.empty() || kWrong.empty() || kProblem.empty()) << "tests/cases/add files not found under " << kCases;
  FixedSource source({{fenced_with_prose(kWrong), fenced_with_prose(kCorrect), kNotPython}});
  std::vector<OptimizeEvent> events;
  auto r = optimize(kProblem, source, options, [&](const OptimizeEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  ASSERT_EQ(source.counts, std::vector<int>{3});  // k samples in one call
  EXPECT_NE(source.prompts[0].find("def get_init_inputs():\n    return []"), std::string::npos);
  EXPECT_EQ(source.seeds[0], 1234u);
  ASSERT_EQ(r->candidates.size(), 3u);
  EXPECT_EQ(r->candidates[0].result.verdict, Verdict::wrong_output) << r->candidates[0].result.message;
  EXPECT_EQ(r->candidates[1].result.verdict, Verdict::correct) << r->candidates[1].result.message;
  EXPECT_NE(r->candidates[2].result.verdict, Verdict::correct);
  EXPECT_EQ(r->candidates[0].extraction, "fenced block 2");
  EXPECT_EQ(r->candidates[2].extraction, "whole text");
  EXPECT_FALSE(r->candidates[2].defines_model_new);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(*r->best, 1u);
  EXPECT_TRUE(r->failure_reasons.empty());
  EXPECT_EQ(r->rounds_run, 1);

  // Files: the problem, the prompt, each module as extracted and each raw completion.
  EXPECT_EQ(read(work / "problem.py"), kProblem);
  EXPECT_EQ(read(work / "prompt.txt"), source.prompts[0]);
  EXPECT_EQ(read(r->candidates[1].file), kCorrect);
  EXPECT_EQ(r->candidates[1].file, fs::absolute(work / "round1" / "sample1.py"));
  EXPECT_EQ(read(r->candidates[2].completion_file), kNotPython);

  int verified = 0;
  bool saw_generated = false;
  for (const OptimizeEvent& e : events) {
    if (e.kind == OptimizeEventKind::generated) saw_generated = true;
    if (e.kind != OptimizeEventKind::candidate_verified) continue;
    ++verified;
    EXPECT_EQ(e.total, 3);
    EXPECT_EQ(e.line.rfind("sample ", 0), 0u) << e.line;
  }
  EXPECT_TRUE(saw_generated);
  EXPECT_EQ(verified, 3);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, OptimizeEventKind::round_done);
  EXPECT_TRUE(events.back().any_correct);

  const Json j = r->to_json();
  EXPECT_EQ(j["best"], 1);
  EXPECT_EQ(j["best_file"], r->candidates[1].file.string());
  EXPECT_EQ(j["source"], "fixed");
  EXPECT_EQ(j["candidates"].size(), 3u);
  EXPECT_EQ(j["candidates"][0]["verdict"], "wrong_output");
  EXPECT_EQ(j["candidates"][1]["result"]["verdict"], "correct");
  EXPECT_TRUE(j["verify_ms"].get<double>() > 0);
  EXPECT_TRUE(j.contains("generate_ms") && j.contains("tokens") && j.contains("tokens_per_s"));
  EXPECT_FALSE(j["sandbox"].get<std::string>().empty());
}

TEST_F(OptimizeTest, NothingCorrectGivesOneFailureReasonPerCandidate) {
  options.k = 2;
  FixedSource source({{fenced_with_prose(kWrong), kNotPython}});
  auto r = optimize(kProblem, source, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->best.has_value());
  ASSERT_EQ(r->failure_reasons.size(), 2u);
  EXPECT_EQ(r->failure_reasons[0].rfind("sample 0: wrong_output", 0), 0u) << r->failure_reasons[0];
  EXPECT_EQ(r->failure_reasons[1].rfind("sample 1: " + std::string(harness::verdict_name(r->candidates[1].result.verdict)), 0),
            0u)
      << r->failure_reasons[1];
  for (const std::string& line : r->failure_reasons) {
    EXPECT_GT(line.size(), std::string("sample 0: wrong_output: ").size()) << "no reason given: " << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  const Json j = r->to_json();
  EXPECT_TRUE(j["best"].is_null());
  EXPECT_EQ(j["failure_reasons"].size(), 2u);
}

TEST_F(OptimizeTest, RefinementFeedsEachFailureBackAndStopsOnceCorrect) {
  options.k = 2;
  options.rounds = 3;
  // Round 1: both fail. Round 2: one call per failure; the first is fixed. No round 3.
  FixedSource source({{fenced_with_prose(kWrong), kNotPython}, {fenced_with_prose(kCorrect)}, {kNotPython}});
  auto r = optimize(kProblem, source, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(source.counts, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(r->rounds_run, 2);
  ASSERT_EQ(r->candidates.size(), 4u);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(*r->best, 2u);
  EXPECT_EQ(r->candidates[2].round, 2);
  EXPECT_EQ(r->candidates[2].sample, 0);
  EXPECT_EQ(r->candidates[2].result.verdict, Verdict::correct);

  // Each refinement prompt: the original prompt, then that candidate's code and verdict.
  const std::string& original = source.prompts[0];
  const std::string& fix_wrong = source.prompts[1];
  const std::string& fix_prose = source.prompts[2];
  EXPECT_EQ(fix_wrong.rfind(original, 0), 0u);
  EXPECT_NE(fix_wrong.find(r->candidates[0].code), std::string::npos);
  EXPECT_NE(fix_wrong.find("It failed verification against Model: wrong_output"), std::string::npos) << fix_wrong;
  EXPECT_NE(fix_wrong.find(r->candidates[0].result.message.substr(0, 40)), std::string::npos);
  EXPECT_EQ(fix_prose.rfind(original, 0), 0u);
  EXPECT_NE(fix_prose.find(kNotPython), std::string::npos);
  EXPECT_NE(fix_prose.find("The code does not define class ModelNew."), std::string::npos);
  EXPECT_NE(fix_prose.find(std::string(harness::verdict_name(r->candidates[1].result.verdict))), std::string::npos);
  EXPECT_NE(source.seeds[1], source.seeds[2]);
  EXPECT_EQ(read(work / "round2" / "sample0.prompt.txt"), fix_wrong);
  EXPECT_TRUE(r->failure_reasons.empty());
  // Round 2 verified with the judge round 1 released (the same problem), ended with the call.
  EXPECT_EQ(r->verify_judges_started, 1);
  EXPECT_GE(r->verify_judges_reused, 1);
  EXPECT_EQ(harness::end_kept_judges(), 0);
}

TEST_F(OptimizeTest, BadInputIsAnErrorBeforeAnythingRuns) {
  FixedSource source({});
  auto no_model = optimize("import torch\ndef get_inputs():\n    return []\n", source, options);
  ASSERT_FALSE(no_model.ok());
  EXPECT_EQ(no_model.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(no_model.status().message().find("class Model"), std::string::npos) << no_model.status().message();

  auto no_inputs = optimize("class Model(nn.Module):\n    pass\n", source, options);
  ASSERT_FALSE(no_inputs.ok());
  EXPECT_NE(no_inputs.status().message().find("def get_inputs"), std::string::npos);

  options.k = 0;
  auto no_k = optimize(kProblem, source, options);
  ASSERT_FALSE(no_k.ok());
  EXPECT_NE(no_k.status().message().find("k >= 1"), std::string::npos);
  EXPECT_TRUE(source.prompts.empty());
  EXPECT_FALSE(fs::exists(work));
}

TEST_F(OptimizeTest, SourceErrorsComeBackWithTheRound) {
  FixedSource source({{"only one"}});
  auto r = optimize(kProblem, source, options);  // asks for 3
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("round 1"), std::string::npos) << r.status().to_string();
  EXPECT_TRUE(fs::exists(work / "problem.py"));
}

// A source that takes its time, as an engine generating 1,000 tokens does.
class SlowSource final : public CompletionSource {
 public:
  SlowSource(std::vector<std::string> texts, int ms) : texts_(std::move(texts)), ms_(ms) {}
  Result<std::vector<std::string>> complete(const std::string&, int, int, const SamplingParams&, const StreamCallback&,
                                            GenerateStats*) override {
    ::usleep(static_cast<useconds_t>(ms_) * 1000);
    return texts_;
  }
  std::string describe() const override { return "slow"; }

 private:
  std::vector<std::string> texts_;
  int ms_;
};

TEST_F(OptimizeTest, TheVerifierGetsReadyWhileTheCandidatesAreGenerated) {
  options.k = 2;
  SlowSource source({fenced_with_prose(kWrong), fenced_with_prose(kCorrect)}, 6000);
  auto r = optimize(kProblem, source, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(*r->best, 1u);
  EXPECT_EQ(r->candidates[0].result.verdict, Verdict::wrong_output);
  // The judge's start and the problem's set-up ran during the 6 s of generation (on a busy
  // machine part of it may come after).
  EXPECT_GT(r->verify_setup_ms, 0);
  EXPECT_GT(r->verify_setup_overlap_ms, 0);
  EXPECT_LE(r->verify_setup_overlap_ms, std::min(r->verify_setup_ms, r->generate_ms) + 1e-6);
  const Json j = r->to_json();
  EXPECT_EQ(j["verify_setup_ms"].get<double>(), r->verify_setup_ms);
  EXPECT_EQ(j["verify_setup_overlap_ms"].get<double>(), r->verify_setup_overlap_ms);
  // The round's set-up steps in order, the last of them the whole set-up.
  ASSERT_EQ(j["verify_timelines_ms"].size(), 1u);
  const Json& t = j["verify_timelines_ms"][0];
  for (const char* k : {"python_probed", "zygote_ready", "judge_started", "setup", "total"}) ASSERT_TRUE(t.contains(k)) << k;
  EXPECT_LE(t["python_probed"].get<double>(), t["zygote_ready"].get<double>());
  EXPECT_LE(t["zygote_ready"].get<double>(), t["judge_started"].get<double>());
  EXPECT_LE(t["judge_started"].get<double>(), t["setup"].get<double>());
  EXPECT_NEAR(t["setup"].get<double>(), r->verify_setup_ms, 50);
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
}

// Streams its completions as the engine does: sample 2 first, then waits (up to `wait_s`) for a
// verdict before handing over samples 0 and 1; a verifier that works while the samples are
// written gives one in time.
class HandsOverOneByOne final : public CompletionSource {
 public:
  HandsOverOneByOne(std::vector<std::string> texts, const std::atomic<int>& verdicts, double wait_s)
      : texts_(std::move(texts)), verdicts_(verdicts), wait_s_(wait_s) {}
  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens, const SamplingParams& s,
                                            const StreamCallback& on_text, GenerateStats* stats) override {
    return complete_each(prompt, n, max_new_tokens, s, on_text, {}, stats);
  }
  Result<std::vector<std::string>> complete_each(const std::string&, int n, int, const SamplingParams&, const StreamCallback&,
                                                 const CompletionDone& on_done, GenerateStats*) override {
    if (n != 3 || texts_.size() != 3) return error(ErrorCode::invalid_argument, "HandsOverOneByOne: 3 samples");
    if (on_done) on_done(2, texts_[2]);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s_);
    while (verdicts_.load() == 0 && std::chrono::steady_clock::now() < until) ::usleep(20000);
    verdict_while_writing = verdicts_.load() > 0;
    if (on_done) {
      on_done(0, texts_[0]);
      on_done(1, texts_[1]);
    }
    return texts_;
  }
  std::string describe() const override { return "one by one"; }
  bool verdict_while_writing = false;

 private:
  std::vector<std::string> texts_;
  const std::atomic<int>& verdicts_;
  double wait_s_;
};

TEST_F(OptimizeTest, EachSampleIsVerifiedWhileTheOthersAreWritten) {
  std::atomic<int> verdicts{0};
  options.verify.on_result = [&](size_t, const harness::CandidateResult&) { ++verdicts; };
  HandsOverOneByOne source({fenced_with_prose(kWrong), fenced_with_prose(kCorrect), kNotPython}, verdicts, 120);
  std::vector<OptimizeEvent> events;
  auto r = optimize(kProblem, source, options, [&](const OptimizeEvent& e) { events.push_back(e); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(source.verdict_while_writing) << "no verdict came while samples were still being written";
  EXPECT_GT(r->verify_while_generating_ms, 0);
  EXPECT_EQ(r->to_json()["verify_while_generating_ms"].get<double>(), r->verify_while_generating_ms);
  // The result lists them in sample order, whatever order they were written and verified in.
  ASSERT_EQ(r->candidates.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r->candidates[static_cast<size_t>(i)].sample, i);
  EXPECT_EQ(r->candidates[0].result.verdict, Verdict::wrong_output) << r->candidates[0].result.message;
  EXPECT_EQ(r->candidates[1].result.verdict, Verdict::correct) << r->candidates[1].result.message;
  EXPECT_NE(r->candidates[2].result.verdict, Verdict::correct);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(*r->best, 1u);
  EXPECT_EQ(r->candidates[*r->best].file.filename(), "sample1.py");
  const auto verified = std::count_if(events.begin(), events.end(),
                                      [](const OptimizeEvent& e) { return e.kind == OptimizeEventKind::candidate_verified; });
  EXPECT_EQ(verified, 3);
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
}

TEST_F(OptimizeTest, VerifyAfterGenerationWaitsForEverySample) {
  std::atomic<int> verdicts{0};
  options.verify.on_result = [&](size_t, const harness::CandidateResult&) { ++verdicts; };
  options.verify_while_generating = false;
  HandsOverOneByOne source({fenced_with_prose(kWrong), fenced_with_prose(kCorrect), kNotPython}, verdicts, 3);
  auto r = optimize(kProblem, source, options);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(source.verdict_while_writing);
  EXPECT_EQ(r->verify_while_generating_ms, 0);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(*r->best, 1u);
}

// Hands over two samples, waits for a verdict (the verifier's workers are running), then fails.
class FailsMidway final : public CompletionSource {
 public:
  FailsMidway(std::vector<std::string> texts, const std::atomic<int>& verdicts) : texts_(std::move(texts)), verdicts_(verdicts) {}
  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens, const SamplingParams& s,
                                            const StreamCallback& on_text, GenerateStats* stats) override {
    return complete_each(prompt, n, max_new_tokens, s, on_text, {}, stats);
  }
  Result<std::vector<std::string>> complete_each(const std::string&, int, int, const SamplingParams&, const StreamCallback&,
                                                 const CompletionDone& on_done, GenerateStats*) override {
    if (on_done) {
      on_done(0, texts_[0]);
      on_done(1, texts_[1]);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (verdicts_.load() == 0 && std::chrono::steady_clock::now() < until) ::usleep(20000);
    return error(ErrorCode::io_error, "the engine failed on sample 2");
  }
  std::string describe() const override { return "fails midway"; }

 private:
  std::vector<std::string> texts_;
  const std::atomic<int>& verdicts_;
};

TEST_F(OptimizeTest, GenerationFailingWhileSamplesAreVerifiedStopsCleanly) {
  std::atomic<int> verdicts{0};
  options.verify.on_result = [&](size_t, const harness::CandidateResult&) { ++verdicts; };
  FailsMidway source({kNotPython, fenced_with_prose(kCorrect)}, verdicts);
  std::vector<OptimizeEvent> events;
  auto r = optimize(kProblem, source, options, [&](const OptimizeEvent& e) { events.push_back(e); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the engine failed on sample 2"), std::string::npos) << r.status().to_string();
  EXPECT_GT(verdicts.load(), 0);
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
}

TEST_F(OptimizeTest, AFailedGenerationStopsTheVerifierItStarted) {
  FixedSource source({{"only one"}});  // asks for 3: an error after the session started
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_FALSE(optimize(kProblem, source, options).ok());
  // The set-up under way is cancelled, not finished first (~2.5 s here before).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_TRUE(no_children_within(10)) << "left running: " << live_children().size();
}

fs::path testdata() {
  const char* env = std::getenv("KERNELLLM_TESTDATA");
  if (env == nullptr) ADD_FAILURE() << "KERNELLLM_TESTDATA is not set (run tools/make_test_data.py --out DIR)";
  return env ? fs::path(env) : fs::path();
}

TEST(EngineSource, OpenEngineMatchesADirectGenerateCall) {
  const fs::path model_dir = testdata() / "models" / "tiny-f32-gqa";
  EngineOptions eo;
  eo.model = model_dir.string();
  eo.threads = 2;
  auto source = open_engine(eo);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ((*source)->describe(), "cpu:" + model_dir.string());

  SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 7;
  GenerateStats stats;
  int streamed = 0;
  auto texts = (*source)->complete("def add(a, b):", 3, 12, sampling,
                                   [&](int32_t, std::string_view) { return ++streamed > 0; }, &stats);
  ASSERT_TRUE(texts.ok()) << texts.status().to_string();
  ASSERT_EQ(texts->size(), 3u);
  EXPECT_GT(streamed, 0);
  EXPECT_GT(stats.generated_tokens, 0);

  // The same through the engine directly (BOS added as HF does).
  auto model = load_model(model_dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto backend = make_cpu_backend(model->config, *model->weights);
  ASSERT_TRUE(backend.ok());
  auto ids = model->tokenizer.encode("def add(a, b):", true);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->front(), *model->tokenizer.bos_id());
  EXPECT_EQ(stats.prompt_tokens, static_cast<int64_t>(ids->size()));
  GenerateOptions go;
  go.num_samples = 3;
  go.max_new_tokens = 12;
  go.sampling = sampling;
  go.stop_ids = model->generation.eos_token_ids;
  auto direct = generate(**backend, model->tokenizer, *ids, go);
  ASSERT_TRUE(direct.ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*texts)[i], (*direct)[i].text) << "sample " << i;

  // The non-owning source over the same backend gives the same texts.
  auto borrowed = make_engine_source(**backend, model->tokenizer, go.stop_ids, "borrowed");
  auto again = borrowed->complete("def add(a, b):", 3, 12, sampling, {}, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *texts);
  EXPECT_EQ(borrowed->describe(), "borrowed");
}

TEST(EngineSource, RandomWeightsOfANamedShapeWithTheModelsTokenizer) {
  EngineOptions eo;
  eo.model = (testdata() / "models" / "tiny-f32-gqa").string();
  eo.random_config = "tiny-llama3-vocab";
  eo.random_seed = 3;
  eo.threads = 2;
  auto source = open_engine(eo);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_NE((*source)->describe().find("random tiny-llama3-vocab"), std::string::npos);
  SamplingParams sampling;
  sampling.seed = 1;
  auto texts = (*source)->complete("hello", 2, 6, sampling, {}, nullptr);
  ASSERT_TRUE(texts.ok()) << texts.status().to_string();
  EXPECT_EQ(texts->size(), 2u);

  eo.random_config = "tiny";  // vocab 1024 < the tokenizer's 128256 ids
  auto small = open_engine(eo);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("tokenizer"), std::string::npos) << small.status().message();

  eo.random_config = "no-such-shape";
  EXPECT_FALSE(open_engine(eo).ok());
}

TEST(EngineSource, ErrorsNameTheCause) {
  EngineOptions eo;
  eo.model = (testdata() / "models" / "no-such-model").string();
  auto missing = open_engine(eo);
  ASSERT_FALSE(missing.ok());

  eo.model = (testdata() / "models" / "tiny-f32-gqa").string();
  eo.device = "tpu";
  auto bad_device = open_engine(eo);
  ASSERT_FALSE(bad_device.ok());
  EXPECT_NE(bad_device.status().message().find("expected cpu, cuda or cuda:N"), std::string::npos);

  if (!cuda_backend_built()) {
    eo.device = "cuda";
    auto no_cuda = open_engine(eo);
    ASSERT_FALSE(no_cuda.ok());
    EXPECT_EQ(no_cuda.status().code(), ErrorCode::unsupported);
    EXPECT_NE(no_cuda.status().message().find("built without the CUDA backend"), std::string::npos);
  }

  eo.device = "cpu";
  eo.gpu_memory_fraction = 1.5;
  auto bad_fraction = open_engine(eo);
  ASSERT_FALSE(bad_fraction.ok());
  EXPECT_NE(bad_fraction.status().message().find("expected a value in (0, 1]"), std::string::npos);
}

TEST(EngineSource, MemoryFractionIsCappedOnlyWhenVerificationSharesTheGpu) {
  const std::vector<std::string> gpu0{"cuda:0"}, gpu1{"cuda:1"}, both{"cuda:0", "cuda:1"}, cpu{"cpu"};
  EXPECT_EQ(engine_memory_fraction("cuda", gpu0, 0.0), kSharedGpuMemoryFraction);
  EXPECT_EQ(engine_memory_fraction("cuda:1", both, 0.0), kSharedGpuMemoryFraction);
  EXPECT_EQ(engine_memory_fraction("cuda:0", {"cuda"}, 0.0), kSharedGpuMemoryFraction);
  EXPECT_EQ(engine_memory_fraction("cuda:0", gpu1, 0.0), 0.0);
  EXPECT_EQ(engine_memory_fraction("cuda", cpu, 0.0), 0.0);
  EXPECT_EQ(engine_memory_fraction("cuda", {}, 0.0), 0.0);  // --no-verify
  EXPECT_EQ(engine_memory_fraction("cpu", gpu0, 0.0), 0.0);
  EXPECT_EQ(engine_memory_fraction("cuda:0", gpu0, 0.8), 0.8);  // the user's value wins
  EXPECT_EQ(engine_memory_fraction("cuda:0", gpu1, 0.3), 0.3);
}

}  // namespace
}  // namespace kernelllm
