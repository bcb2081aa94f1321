// Scheduler (continuous batching) on the CPU backend and a tiny random Llama-3: requests run
// together, staggered or queued by capacity give exactly the completions of solo generate()
// runs; cancelling one request leaves the others intact; bad requests are clear errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/scheduler.h"
#include "kernelllm/engine/tokenizer.h"
#include "parity/tiny_llama_golden.h"

namespace kernelllm {
namespace {

struct Job {
  std::vector<int32_t> prompt;
  GenerateOptions options;
};

GenerateOptions opts(int32_t k, int32_t max_new, uint64_t seed, float temperature = 1.0f) {
  GenerateOptions o;
  o.num_samples = k;
  o.max_new_tokens = max_new;
  // top-k keeps draws cheap on the tiny model's nearly flat 128k-id distribution.
  o.sampling = SamplingParams{temperature, 0.9f, 40, seed};
  return o;
}

class SchedulerParity : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::load_tiny_llama("tiny-f32-gqa", model_));
    auto tok = Tokenizer::from_file(model_.dir / "tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
    CpuBackendOptions options;
    options.kv_page_tokens = 8;
    auto backend = make_cpu_backend(model_.config, *model_.weights, options);
    ASSERT_TRUE(backend.ok()) << backend.status().to_string();
    backend_ = std::move(backend).value();
    ASSERT_GE(model_.prompts.size(), 4u);
    jobs_ = {
        {model_.prompts[1], opts(1, 9, 11)},
        {model_.prompts[2], opts(3, 6, 22)},
        {model_.prompts[0], opts(2, 12, 33, 0.0f)},
        {model_.prompts[3], opts(2, 4, 44)},
        {model_.prompts[2], opts(1, 0, 55)},
    };
    // A stop id that sample 0 of job 1 emits at its third step, so one sample stops early.
    const auto solo1 = solo(jobs_[1]);
    jobs_[1].options.stop_ids = {solo1[0].tokens[2]};
    for (const Job& j : jobs_) expected_.push_back(solo(j));
    ASSERT_EQ(expected_[1][0].finish, FinishReason::stop);
  }

  std::vector<Completion> solo(const Job& j) {
    auto out = generate(*backend_, *tokenizer_, j.prompt, j.options);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return out.ok() ? std::move(out).value() : std::vector<Completion>{};
  }

  void expect_same(const std::vector<Completion>& got, const std::vector<Completion>& want, size_t job) {
    ASSERT_EQ(got.size(), want.size()) << "job " << job;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "job " << job << " sample " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "job " << job << " sample " << i;
      EXPECT_EQ(got[i].finish, want[i].finish) << "job " << job << " sample " << i;
    }
  }

  RequestId submit(Scheduler& s, const Job& j, StreamCallback cb = {}) {
    auto id = s.submit(j.prompt, j.options, std::move(cb));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : -1;
  }

  std::vector<Completion> result(Scheduler& s, RequestId id) {
    auto r = s.take_result(id);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r->completions) : std::vector<Completion>{};
  }

  void expect_all_released() {
    for (SeqId id = 0; id < 64; ++id) EXPECT_EQ(backend_->sequence_length(id), -1) << "sequence " << id;
  }

  testing::TinyLlama model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::vector<Job> jobs_;
  std::vector<std::vector<Completion>> expected_;
};

TEST_F(SchedulerParity, RequestsSubmittedTogetherEqualSoloRuns) {
  Scheduler s(*backend_, *tokenizer_);
  std::vector<RequestId> ids;
  for (const Job& j : jobs_) ids.push_back(submit(s, j));
  ASSERT_TRUE(s.run_until_idle().ok());
  for (size_t i = 0; i < jobs_.size(); ++i) expect_same(result(s, ids[i]), expected_[i], i);
  EXPECT_EQ(s.live_sequences(), 0);
  expect_all_released();
}

TEST_F(SchedulerParity, StaggeredSubmissionsEqualSoloRuns) {
  Scheduler s(*backend_, *tokenizer_);
  std::vector<RequestId> ids;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    ids.push_back(submit(s, jobs_[i]));
    for (size_t k = 0; k < 2 + i; ++k) ASSERT_TRUE(s.step().ok());
  }
  ASSERT_TRUE(s.run_until_idle().ok());
  for (size_t i = 0; i < jobs_.size(); ++i) expect_same(result(s, ids[i]), expected_[i], i);
  expect_all_released();
}

TEST_F(SchedulerParity, CapacityLimitsQueueInsteadOfFailing) {
  SchedulerOptions limits;
  limits.max_sequences = 4;   // job 1 (k = 3) needs all four for its prefill
  limits.max_kv_tokens = 60;  // job 0 (7 + 9) and job 2 (1 + 24) fit together, job 1 (33 + 18) alone
  Scheduler s(*backend_, *tokenizer_, limits);
  std::vector<RequestId> ids;
  for (size_t i = 0; i < 3; ++i) ids.push_back(submit(s, jobs_[i]));
  int64_t most_queued = 0;
  while (!s.idle()) {
    ASSERT_TRUE(s.step().ok());
    EXPECT_LE(s.live_sequences(), limits.max_sequences);
    EXPECT_LE(s.reserved_kv_tokens(), limits.max_kv_tokens);
    most_queued = std::max(most_queued, s.queued());
  }
  EXPECT_GE(most_queued, 1);
  for (size_t i = 0; i < 3; ++i) expect_same(result(s, ids[i]), expected_[i], i);
  expect_all_released();
}

TEST_F(SchedulerParity, CancelledRequestDoesNotDisturbOthers) {
  Scheduler s(*backend_, *tokenizer_);
  const RequestId a = submit(s, jobs_[0]);
  int pieces = 0;
  // Job 3 cancels itself from its stream callback; job 2 is cancelled from outside.
  const RequestId b = submit(s, jobs_[3], [&pieces](int32_t, std::string_view) { return ++pieces < 3; });
  const RequestId c = submit(s, jobs_[2]);
  const RequestId d = submit(s, jobs_[1]);
  ASSERT_TRUE(s.step().ok());
  ASSERT_TRUE(s.step().ok());
  s.cancel(c);
  ASSERT_TRUE(s.run_until_idle().ok());
  expect_same(result(s, a), expected_[0], 0);
  expect_same(result(s, d), expected_[1], 1);
  const auto got_b = result(s, b);
  ASSERT_EQ(got_b.size(), 2u);
  for (const Completion& cmp : got_b) EXPECT_EQ(cmp.finish, FinishReason::cancelled);
  const auto got_c = result(s, c);
  ASSERT_EQ(got_c.size(), 2u);
  for (size_t i = 0; i < got_c.size(); ++i) {
    EXPECT_EQ(got_c[i].finish, FinishReason::cancelled);
    EXPECT_LT(got_c[i].tokens.size(), expected_[2][i].tokens.size());
    // What it produced before the cancel is the solo run's prefix.
    EXPECT_TRUE(std::equal(got_c[i].tokens.begin(), got_c[i].tokens.end(), expected_[2][i].tokens.begin()));
  }
  expect_all_released();
}

TEST_F(SchedulerParity, CancelledWhileQueuedFinishesEmpty) {
  SchedulerOptions limits;
  limits.max_sequences = 3;
  Scheduler s(*backend_, *tokenizer_, limits);
  const RequestId a = submit(s, jobs_[2]);
  const RequestId b = submit(s, jobs_[0]);
  ASSERT_TRUE(s.step().ok());
  EXPECT_EQ(s.queued(), 1);
  s.cancel(b);
  EXPECT_EQ(s.queued(), 0);
  const auto got_b = result(s, b);
  ASSERT_EQ(got_b.size(), 1u);
  EXPECT_TRUE(got_b[0].tokens.empty());
  EXPECT_EQ(got_b[0].finish, FinishReason::cancelled);
  auto pending = s.take_result(a);
  ASSERT_FALSE(pending.ok());
  EXPECT_EQ(pending.status().code(), ErrorCode::out_of_range);
  ASSERT_TRUE(s.run_until_idle().ok());
  expect_same(result(s, a), expected_[2], 2);
}

TEST_F(SchedulerParity, BadRequestsAreClearErrors) {
  SchedulerOptions limits;
  limits.max_sequences = 4;
  limits.max_kv_tokens = 50;
  Scheduler s(*backend_, *tokenizer_, limits);
  const std::vector<int32_t> prompt = model_.prompts[1];
  struct Case {
    std::vector<int32_t> prompt;
    GenerateOptions options;
    ErrorCode code;
    std::string text;
  };
  std::vector<int32_t> too_long(static_cast<size_t>(model_.config.max_position_embeddings) + 1, 5);
  std::vector<int32_t> bad_id = prompt;
  bad_id[3] = static_cast<int32_t>(model_.config.vocab_size);
  GenerateOptions bad_top_p = opts(1, 4, 1);
  bad_top_p.sampling.top_p = 0.0f;
  const std::vector<Case> cases = {
      {prompt, opts(0, 4, 1), ErrorCode::invalid_argument, "num_samples >= 1, found 0"},
      {prompt, opts(1, -1, 1), ErrorCode::invalid_argument, "max_new_tokens >= 0, found -1"},
      {{}, opts(1, 4, 1), ErrorCode::invalid_argument, "non-empty prompt"},
      {too_long, opts(1, 4, 1), ErrorCode::out_of_range, "exceeds max_position_embeddings"},
      {bad_id, opts(1, 4, 1), ErrorCode::out_of_range, "prompt token 3"},
      {prompt, bad_top_p, ErrorCode::invalid_argument, "top_p"},
      {prompt, opts(4, 4, 1), ErrorCode::resource_exhausted, "needs 5 sequences"},
      {prompt, opts(2, 30, 1), ErrorCode::resource_exhausted, "needs 67 KV tokens"},
  };
  for (const Case& c : cases) {
    auto id = s.submit(c.prompt, c.options);
    ASSERT_FALSE(id.ok()) << c.text;
    EXPECT_EQ(id.status().code(), c.code) << id.status().to_string();
    EXPECT_NE(id.status().message().find(c.text), std::string::npos) << id.status().to_string();
  }
  EXPECT_TRUE(s.idle());
  auto unknown = s.take_result(7);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::not_found);
}

}  // namespace
}  // namespace kernelllm
