// generate() on the CPU backend and a tiny random Llama-3 with the toy tokenizer: greedy
// equals HF greedy; seeded sampling reproduces and does not depend on k; stop ids, length
// limits, streaming (text == decode of the tokens) and cancellation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/tokenizer.h"
#include "parity/tiny_llama_golden.h"

namespace kernelllm {
namespace {

class GeneratorParity : public ::testing::Test {
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
  }

  std::vector<Completion> run(std::span<const int32_t> prompt, const GenerateOptions& options,
                              const StreamCallback& cb = {}, GenerateStats* stats = nullptr) {
    auto out = generate(*backend_, *tokenizer_, prompt, options, cb, stats);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return out.ok() ? std::move(out).value() : std::vector<Completion>{};
  }

  std::string decode(const std::vector<int32_t>& ids) {
    auto text = tokenizer_->decode(ids, /*skip_special_tokens=*/true);
    EXPECT_TRUE(text.ok());
    return text.ok() ? *text : std::string();
  }

  testing::TinyLlama model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
};

GenerateOptions sampled(int32_t k, int32_t max_new, uint64_t seed) {
  GenerateOptions o;
  o.num_samples = k;
  o.max_new_tokens = max_new;
  // top-k keeps the draws cheap: the tiny random model's distribution is nearly flat over
  // 128k ids, so top-p alone would sort most of the vocabulary at every draw.
  o.sampling = SamplingParams{1.0f, 0.9f, 40, seed};
  return o;
}

TEST_F(GeneratorParity, GreedyEqualsHfGreedy) {
  for (size_t i : {size_t{1}, size_t{2}}) {
    GenerateOptions o;
    o.num_samples = 2;
    o.max_new_tokens = static_cast<int32_t>(model_.greedy[i].size());
    o.sampling.temperature = 0.0f;
    GenerateStats stats;
    const auto out = run(model_.prompts[i], o, {}, &stats);
    ASSERT_EQ(out.size(), 2u);
    for (const auto& c : out) {
      EXPECT_EQ(c.tokens, model_.greedy[i]) << "prompt " << i;
      EXPECT_EQ(c.finish, FinishReason::length);
      EXPECT_EQ(c.text, decode(c.tokens));
    }
    EXPECT_EQ(stats.prompt_tokens, static_cast<int64_t>(model_.prompts[i].size()));
    EXPECT_EQ(stats.generated_tokens, 2 * static_cast<int64_t>(model_.greedy[i].size()));
    EXPECT_GT(stats.decode_ms, 0.0);
    EXPECT_EQ(backend_->sequence_length(0), -1) << "all sequences are released";
  }
}

TEST_F(GeneratorParity, SeededSamplesReproduceAndDoNotDependOnK) {
  const auto& prompt = model_.prompts[1];
  const auto four = run(prompt, sampled(4, 24, 77));
  const auto again = run(prompt, sampled(4, 24, 77));
  const auto two = run(prompt, sampled(2, 24, 77));
  const auto other_seed = run(prompt, sampled(2, 24, 78));
  ASSERT_EQ(four.size(), 4u);
  ASSERT_EQ(two.size(), 2u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(four[i].tokens, again[i].tokens) << "sample " << i;
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(four[i].tokens, two[i].tokens) << "sample " << i;
  EXPECT_NE(four[0].tokens, four[1].tokens);
  EXPECT_NE(four[0].tokens, other_seed[0].tokens);
}

TEST_F(GeneratorParity, StopIdEndsASampleAndIsKeptInTokensNotText) {
  const auto& greedy = model_.greedy[2];
  // The first greedy token that did not occur before it: generation must stop right there.
  size_t stop_at = 1;
  while (std::find(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(stop_at), greedy[stop_at]) !=
         greedy.begin() + static_cast<std::ptrdiff_t>(stop_at)) {
    ++stop_at;
  }
  GenerateOptions o;
  o.max_new_tokens = 64;
  o.sampling.temperature = 0.0f;
  o.stop_ids = {greedy[stop_at], 128009};
  const auto out = run(model_.prompts[2], o);
  ASSERT_EQ(out.size(), 1u);
  const std::vector<int32_t> want(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(stop_at + 1));
  EXPECT_EQ(out[0].tokens, want);
  EXPECT_EQ(out[0].finish, FinishReason::stop);
  EXPECT_EQ(out[0].text, decode(std::vector<int32_t>(want.begin(), want.end() - 1)));
}

TEST_F(GeneratorParity, StreamedTextEqualsDecodedTokensPerSample) {
  std::map<int32_t, std::string> streamed;
  const auto out = run(model_.prompts[1], sampled(3, 20, 5), [&](int32_t i, std::string_view text) {
    streamed[i] += std::string(text);
    return true;
  });
  ASSERT_EQ(out.size(), 3u);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[static_cast<size_t>(i)].tokens.size(), 20u);
    EXPECT_EQ(out[static_cast<size_t>(i)].text, decode(out[static_cast<size_t>(i)].tokens));
    EXPECT_EQ(streamed[i], out[static_cast<size_t>(i)].text) << "sample " << i;
  }
}

TEST_F(GeneratorParity, EachSampleIsHandedOverWhenItStops) {
  // A stop id that sample 0 draws at its third step (the draws depend on seed, sample and step
  // only): it stops there while a longer sample decodes on.
  const auto free_run = run(model_.prompts[1], sampled(3, 20, 5));
  ASSERT_EQ(free_run.size(), 3u);
  GenerateOptions o = sampled(3, 20, 5);
  o.stop_ids = {free_run[0].tokens[2]};
  int pieces = 0;
  std::map<int32_t, int> pieces_when_done;
  std::map<int32_t, Completion> handed;
  auto out = generate(
      *backend_, *tokenizer_, model_.prompts[1], o,
      [&](int32_t, std::string_view) {
        ++pieces;
        return true;
      },
      nullptr,
      [&](int32_t i, const Completion& c) {
        EXPECT_EQ(handed.count(i), 0u) << "sample " << i << " handed over twice";
        handed[i] = c;
        pieces_when_done[i] = pieces;
      });
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(handed.size(), 3u);
  size_t longest = 0;
  for (int32_t i = 0; i < 3; ++i) {
    const Completion& c = (*out)[static_cast<size_t>(i)];
    EXPECT_EQ(handed[i].tokens, c.tokens) << "sample " << i;
    EXPECT_EQ(handed[i].text, c.text) << "sample " << i;
    EXPECT_EQ(handed[i].finish, c.finish) << "sample " << i;
    longest = std::max(longest, c.tokens.size());
  }
  EXPECT_LE((*out)[0].tokens.size(), 3u);
  EXPECT_EQ((*out)[0].finish, FinishReason::stop);
  ASSERT_GT(longest, (*out)[0].tokens.size() + 1) << "every sample stopped with sample 0";
  EXPECT_LT(pieces_when_done[0], pieces) << "sample 0 was handed over only after the others finished";
}

TEST_F(GeneratorParity, CallbackReturningFalseCancels) {
  int calls = 0;
  const auto out = run(model_.prompts[1], sampled(2, 50, 9), [&](int32_t, std::string_view) { return ++calls < 3; });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(calls, 3);
  for (const auto& c : out) {
    EXPECT_EQ(c.finish, FinishReason::cancelled);
    EXPECT_LT(c.tokens.size(), 50u);
  }
}

TEST_F(GeneratorParity, StopsAtMaxPositionEmbeddings) {
  const std::vector<int32_t> prompt(static_cast<size_t>(model_.config.max_position_embeddings - 3), 42);
  const auto out = run(prompt, sampled(2, 100, 1));
  ASSERT_EQ(out.size(), 2u);
  for (const auto& c : out) {
    EXPECT_EQ(c.tokens.size(), 3u);
    EXPECT_EQ(c.finish, FinishReason::length);
  }
}

TEST_F(GeneratorParity, RejectsBadOptions) {
  const auto& prompt = model_.prompts[1];
  GenerateOptions zero_k = sampled(0, 4, 1);
  GenerateOptions bad_p = sampled(1, 4, 1);
  bad_p.sampling.top_p = 0.0f;
  GenerateOptions negative_len = sampled(1, -1, 1);
  for (const auto* o : {&zero_k, &bad_p, &negative_len}) {
    EXPECT_EQ(generate(*backend_, *tokenizer_, prompt, *o).status().code(), ErrorCode::invalid_argument);
  }
  EXPECT_FALSE(generate(*backend_, *tokenizer_, std::span<const int32_t>(), sampled(1, 4, 1)).ok());
  const std::vector<int32_t> bad_id = {1, static_cast<int32_t>(model_.config.vocab_size)};
  EXPECT_EQ(generate(*backend_, *tokenizer_, bad_id, sampled(1, 4, 1)).status().code(), ErrorCode::out_of_range);
  EXPECT_EQ(backend_->sequence_length(0), -1) << "a failed prefill releases its sequence";
}

TEST_F(GeneratorParity, ZeroNewTokensReturnsEmptyCompletions) {
  const auto out = run(model_.prompts[0], sampled(3, 0, 1));
  ASSERT_EQ(out.size(), 3u);
  for (const auto& c : out) {
    EXPECT_TRUE(c.tokens.empty());
    EXPECT_EQ(c.finish, FinishReason::length);
  }
}

}  // namespace
}  // namespace kernelllm
