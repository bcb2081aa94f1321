// The server's pure parts: stop-string cutting while streaming (StopFilter) and the Llama-3 chat
// format (recognition of a tokenizer_config.json template, rendering). HTTP is tested end to end
// by tests/python/test_serve.py with the openai client.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernelllm/serve/chat_template.h"
#include "kernelllm/serve/engine_loop.h"

namespace kernelllm::serve {
namespace {

std::string feed(StopFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += f.push(p);
  return out + f.finish();
}

TEST(StopFilter, CutsAtAStopStringSplitAcrossPieces) {
  const std::vector<std::string> stops = {"END"};
  StopFilter f(&stops);
  EXPECT_EQ(f.push("abc E"), "abc ");  // "E" may begin "END": held back
  EXPECT_EQ(f.push("N"), "");
  EXPECT_EQ(f.push("D tail"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.finish(), "");
  EXPECT_EQ(f.push("more"), "");
}

TEST(StopFilter, ReleasesHeldTextWhenTheStopDoesNotFollow) {
  const std::vector<std::string> stops = {"END", "\n\n"};
  StopFilter f(&stops);
  EXPECT_EQ(feed(f, {"x E", "Nd", "\n", "y"}), "x ENd\ny");
  EXPECT_FALSE(f.stopped());
}

TEST(StopFilter, TheEarliestOfSeveralStopsWins) {
  const std::vector<std::string> stops = {"cd", "b"};
  StopFilter f(&stops);
  EXPECT_EQ(feed(f, {"abcd"}), "a");
  EXPECT_TRUE(f.stopped());
}

TEST(StopFilter, WithoutStopsEverythingPassesAtOnce) {
  const std::vector<std::string> stops;
  StopFilter f(&stops);
  EXPECT_EQ(f.push("abc"), "abc");
  EXPECT_EQ(f.finish(), "");
}

TEST(ChatTemplate, RecognizesLlama3AndRendersTrimmedTurns) {
  auto t = recognize_chat_template("{{ '<|start_header_id|>' + m + '<|end_header_id|>' }}...<|eot_id|>", "<|begin_of_text|>");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::llama3);
  EXPECT_EQ(t->render({{"system", " Be brief. "}, {"user", "hi\n"}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama31PutsTheDatesAndTheSystemMessageFirst) {
  auto t = recognize_chat_template(
      "<|start_header_id|><|end_header_id|><|eot_id|> set date_string = \"1 Jan 2025\" Cutting Knowledge Date", "");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::llama31);
  EXPECT_EQ(t->render({{"user", "hi"}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 1 Jan 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, RefusesAnotherFormatNamingWhatIsMissing) {
  auto t = recognize_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), ErrorCode::unsupported);
  EXPECT_NE(t.status().message().find("<|start_header_id|>"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace kernelllm::serve
