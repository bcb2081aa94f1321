// extract_model_new: which fenced block wins, info strings, unterminated last blocks, the
// whole-text fallback (fence lines dropped), CRLF, and the exact text written out.
#include "kernelllm/pipeline/extract.h"

#include <gtest/gtest.h>

#include <string>

namespace kernelllm {
namespace {

constexpr std::string_view kModelNew =
    "import torch\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return x\n";

TEST(Extract, FirstBlockDefiningModelNewWinsOverEarlierBlocks) {
  const std::string text = "Here is the reference again:\n```python\nclass Model(nn.Module):\n    pass\n```\n"
                           "And the Triton version:\n```python\n" + std::string(kModelNew) +
                           "```\nA second try:\n```python\nclass ModelNew:\n    other = 1\n```\n";
  ExtractedCode e = extract_model_new(text);
  EXPECT_EQ(e.code, kModelNew);
  EXPECT_EQ(e.how, "fenced block 2");
  EXPECT_TRUE(e.defines_model_new);
}

TEST(Extract, InfoStringsAndIndentedFencesAreFences) {
  for (std::string_view open : {"```", "```python", "```py3 title=x", "  ```python"}) {
    const std::string text = "prose\n" + std::string(open) + "\n" + std::string(kModelNew) + "   ```\ntrailing prose\n";
    ExtractedCode e = extract_model_new(text);
    EXPECT_EQ(e.code, kModelNew) << open;
    EXPECT_EQ(e.how, "fenced block 1") << open;
  }
}

TEST(Extract, UnterminatedLastBlockRunsToTheEnd) {
  const std::string text = "```python\nimport torch\n```\n\n```python\n" + std::string(kModelNew) + "        # cut off by max_new_tok";
  ExtractedCode e = extract_model_new(text);
  EXPECT_EQ(e.code, std::string(kModelNew) + "        # cut off by max_new_tok\n");
  EXPECT_EQ(e.how, "fenced block 2");
  EXPECT_TRUE(e.defines_model_new);
}

TEST(Extract, BareCodeIsTheWholeText) {
  ExtractedCode e = extract_model_new("\n\n" + std::string(kModelNew) + "\n\n");
  EXPECT_EQ(e.code, kModelNew);
  EXPECT_EQ(e.how, "whole text");
  EXPECT_TRUE(e.defines_model_new);
}

TEST(Extract, NoBlockDefinesModelNewFallsBackToTextWithoutFenceLines) {
  const std::string text = "I will write it.\n```python\nimport triton\n```\nclass ModelNew(nn.Module):\n    pass";
  ExtractedCode e = extract_model_new(text);
  EXPECT_EQ(e.code, "I will write it.\nimport triton\nclass ModelNew(nn.Module):\n    pass\n");
  EXPECT_EQ(e.how, "whole text");
  EXPECT_TRUE(e.defines_model_new);  // found outside any block
}

TEST(Extract, NonsenseHasNoModelNew) {
  ExtractedCode e = extract_model_new("the the the ``` ok\n```\nfoo bar\n");
  EXPECT_EQ(e.how, "whole text");
  EXPECT_FALSE(e.defines_model_new);
  EXPECT_EQ(e.code, "the the the ``` ok\nfoo bar\n");  // only lines starting with ``` are fences
}

TEST(Extract, ModelNewMustStartTheLineAndBeTheWholeName) {
  EXPECT_FALSE(extract_model_new("```\n    class ModelNew(nn.Module):\n```\n").defines_model_new);
  EXPECT_FALSE(extract_model_new("```\nclass ModelNewer(nn.Module):\n```\n").defines_model_new);
  EXPECT_FALSE(extract_model_new("# class ModelNew\n").defines_model_new);
  EXPECT_TRUE(extract_model_new("class ModelNew:\n    pass\n").defines_model_new);
  EXPECT_TRUE(extract_model_new("class ModelNew (nn.Module):\n").defines_model_new);
}

TEST(Extract, CrLfLineEndingsBecomeLf) {
  ExtractedCode e = extract_model_new("```python\r\nclass ModelNew:\r\n    pass\r\n```\r\n");
  EXPECT_EQ(e.code, "class ModelNew:\n    pass\n");
  EXPECT_EQ(e.how, "fenced block 1");
}

TEST(Extract, EmptyAndBlankTextGiveEmptyCode) {
  for (std::string_view text : {"", "\n\n  \n", "```\n```\n"}) {
    ExtractedCode e = extract_model_new(text);
    EXPECT_EQ(e.code, "") << text;
    EXPECT_EQ(e.how, "whole text");
    EXPECT_FALSE(e.defines_model_new);
  }
}

TEST(Extract, BlankLinesInsideTheBlockAreKeptOnlyBetweenCode) {
  ExtractedCode e = extract_model_new("```\n\n\nimport torch\n\n\nclass ModelNew:\n    pass\n\n\n```");
  EXPECT_EQ(e.code, "import torch\n\n\nclass ModelNew:\n    pass\n");
}

}  // namespace
}  // namespace kernelllm
