// The host side of decode steps launched one ahead (decode_chain.h): which steps the chain
// follows, the step it predicts, and whether a caller's next step is that one (rows left out
// for stopped samples) or not (anything else differs).
#include "engine/decode_chain.h"

#include <gtest/gtest.h>

namespace kernelllm {
namespace {

RowDraw draw(int64_t row, uint64_t index, uint64_t step, float temperature = 0.6f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = 0.95f;
  p.seed = 7;
  return RowDraw{row, p, index, step};
}

// Three samples on sequences 4, 9, 2 fed tokens 10, 11, 12; draws in another order than rows.
struct Step {
  std::vector<int32_t> tokens = {10, 11, 12};
  std::vector<ForwardRequest> batch;
  std::vector<RowDraw> draws = {draw(2, 2, 5), draw(0, 0, 5), draw(1, 1, 5)};
  Step() {
    const SeqId seqs[] = {4, 9, 2};
    for (size_t i = 0; i < 3; ++i) batch.push_back(ForwardRequest{seqs[i], {&tokens[i], 1}, false});
  }
};

TEST(DecodeChain, ServesSingleTokenStepsWithOneDrawPerRow) {
  Step s;
  EXPECT_TRUE(chain_serves(s.batch, s.draws));
  EXPECT_FALSE(chain_serves({}, {}));
  auto two_draws = s.draws;
  two_draws[2].row = 0;  // row 0 twice, row 1 none
  EXPECT_FALSE(chain_serves(s.batch, two_draws));
  EXPECT_FALSE(chain_serves(s.batch, std::span(s.draws).first(2)));
  auto all_logits = s.batch;
  all_logits[1].all_logits = true;
  EXPECT_FALSE(chain_serves(all_logits, s.draws));
  const std::vector<int32_t> prompt = {1, 2, 3};
  auto prefill = s.batch;
  prefill[0].tokens = prompt;
  EXPECT_FALSE(chain_serves(prefill, s.draws));
}

TEST(DecodeChain, NextStepKeepsRowsAndDrawsOneStepOn) {
  Step s;
  const std::vector<ChainRow> own = chain_rows(s.batch, s.draws);
  ASSERT_EQ(own.size(), 3u);
  EXPECT_EQ(own[2].seq, 2);
  EXPECT_EQ(own[2].draw.index, 2u);
  EXPECT_EQ(own[2].draw.step, 5u);
  const std::vector<ChainRow> next = chain_next(s.batch, s.draws);
  ASSERT_EQ(next.size(), 3u);
  const SeqId seqs[] = {4, 9, 2};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(next[i].seq, seqs[i]);
    EXPECT_EQ(next[i].draw.row, static_cast<int64_t>(i));
    EXPECT_EQ(next[i].draw.index, i);
    EXPECT_EQ(next[i].draw.step, 6u);
    EXPECT_FLOAT_EQ(next[i].draw.params.temperature, 0.6f);
  }
}

TEST(DecodeChain, MatchesTheStepAheadOrItWithRowsLeftOut) {
  Step s;
  const std::vector<ChainRow> ahead = chain_next(s.batch, s.draws);
  const std::vector<int32_t> fed = {20, 21, 22};  // what the step ahead was fed (s's draws)
  // The caller's next step as generator.cpp builds it: the same rows, the drawn tokens.
  std::vector<ForwardRequest> batch;
  for (size_t i = 0; i < 3; ++i) batch.push_back(ForwardRequest{ahead[i].seq, {&fed[i], 1}, false});
  std::vector<RowDraw> draws = {draw(0, 0, 6), draw(1, 1, 6), draw(2, 2, 6)};
  auto rows = chain_match(ahead, fed, batch, draws);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<int64_t>{0, 1, 2}));

  // Sample 1 stopped: its row is left out, the others move up.
  const std::vector<ForwardRequest> two = {batch[0], batch[2]};
  const std::vector<RowDraw> two_draws = {draw(0, 0, 6), draw(1, 2, 6)};
  rows = chain_match(ahead, fed, two, two_draws);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<int64_t>{0, 2}));

  // Rows in another order still match, each to its own sequence's row.
  const std::vector<ForwardRequest> swapped = {batch[2], batch[0]};
  const std::vector<RowDraw> swapped_draws = {draw(0, 2, 6), draw(1, 0, 6)};
  rows = chain_match(ahead, fed, swapped, swapped_draws);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<int64_t>{2, 0}));
}

TEST(DecodeChain, AnythingElseDoesNotMatch) {
  Step s;
  const std::vector<ChainRow> ahead = chain_next(s.batch, s.draws);
  const std::vector<int32_t> fed = {20, 21, 22};
  std::vector<ForwardRequest> batch;
  for (size_t i = 0; i < 3; ++i) batch.push_back(ForwardRequest{ahead[i].seq, {&fed[i], 1}, false});
  const std::vector<RowDraw> draws = {draw(0, 0, 6), draw(1, 1, 6), draw(2, 2, 6)};
  ASSERT_TRUE(chain_match(ahead, fed, batch, draws).has_value());

  const int32_t other = 99;
  auto changed = batch;
  changed[1].tokens = {&other, 1};  // another token than the one drawn
  EXPECT_FALSE(chain_match(ahead, fed, changed, draws).has_value());
  changed = batch;
  changed[1].seq = 5;  // a sequence the step ahead does not extend (a new one)
  EXPECT_FALSE(chain_match(ahead, fed, changed, draws).has_value());
  changed = batch;
  changed[1].seq = changed[0].seq;  // one sequence twice
  EXPECT_FALSE(chain_match(ahead, fed, changed, draws).has_value());
  auto more = batch;
  more.push_back(ForwardRequest{5, {&other, 1}, false});  // a row the step ahead lacks
  auto more_draws = draws;
  more_draws.push_back(draw(3, 3, 6));
  EXPECT_FALSE(chain_match(ahead, fed, more, more_draws).has_value());
  for (int field = 0; field < 5; ++field) {
    auto d = draws;
    switch (field) {
      case 0: d[2].step = 7; break;
      case 1: d[2].index = 5; break;
      case 2: d[2].params.temperature = 0.0f; break;
      case 3: d[2].params.top_k = 50; break;
      default: d[2].params.seed = 8; break;
    }
    EXPECT_FALSE(chain_match(ahead, fed, batch, d).has_value()) << "field " << field;
  }
  EXPECT_FALSE(chain_match(ahead, std::span(fed).first(2), batch, draws).has_value());
  auto released = ahead;
  released[1].seq = -1;  // its sequence was released: the row matches nothing, not even seq -1
  const std::vector<ForwardRequest> two = {batch[0], batch[2]};
  const std::vector<RowDraw> two_draws = {draw(0, 0, 6), draw(1, 2, 6)};
  EXPECT_TRUE(chain_match(released, fed, two, two_draws).has_value());
  changed = batch;
  changed[1].seq = -1;
  EXPECT_FALSE(chain_match(released, fed, changed, draws).has_value());
  EXPECT_FALSE(chain_match(ahead, fed, {}, {}).has_value());
}

}  // namespace
}  // namespace kernelllm
