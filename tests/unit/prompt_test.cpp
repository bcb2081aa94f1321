// Prompt template: PROMPT_TEMPLATE extraction from kernelllm.py variants, Python str.format
// semantics for the module field, the built-in template's shape, and the lookup order.
#include "kernelllm/pipeline/prompt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kernelllm {
namespace {

std::string extract_ok(std::string_view src) {
  auto r = extract_prompt_template(src, "kernelllm.py");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

TEST(PromptExtract, TripleQuotedWithEscapedQuotesAndOtherStrings) {
  const std::string src =
      "\"\"\"Module docstring.\n\nPROMPT_TEMPLATE = 'not this one'\n\"\"\"\n"
      "import sys\n"
      "OTHER = \"\"\"\nx = 1  # PROMPT_TEMPLATE = 'nor this'\n\"\"\"\n"
      "PROMPT_TEMPLATE = \"\"\"\n<|begin_of_text|>Task.\n"
      "def f():\n    \\\"\\\"\\\"doc\\\"\\\"\\\"\n    return \"q\"\n```\n{}\n```\nEnd!\n\"\"\"\n"
      "\nclass K:\n    pass\n";
  EXPECT_EQ(extract_ok(src),
            "\n<|begin_of_text|>Task.\ndef f():\n    \"\"\"doc\"\"\"\n    return \"q\"\n```\n{}\n```\nEnd!\n");
}

TEST(PromptExtract, SingleQuotedEscapesDecodeLikePython) {
  EXPECT_EQ(extract_ok(R"(PROMPT_TEMPLATE = 'a\tb\nc\\d\'e\"f\x41\101\u00e9\U0001F600\d\0')"),
            std::string("a\tb\nc\\d'e\"fAA\xC3\xA9\xF0\x9F\x98\x80\\d") + std::string(1, '\0'));
  EXPECT_EQ(extract_ok("PROMPT_TEMPLATE = \"line \\\nstill\"\n"), "line still");
}

TEST(PromptExtract, RawStringsKeepBackslashes) {
  EXPECT_EQ(extract_ok(R"(PROMPT_TEMPLATE = r"""a\nb\"""c""")"), R"(a\nb\"""c)");
  EXPECT_EQ(extract_ok(R"(PROMPT_TEMPLATE = R'x\'y')"), R"(x\'y)");
}

TEST(PromptExtract, AdjacentLiteralsConcatenate) {
  const std::string src =
      "PROMPT_TEMPLATE = (\n"
      "    \"first\\n\"  # a comment\n"
      "    r'\\raw'\n"
      "    u\"\"\"{}\"\"\"\n"
      ")\n";
  EXPECT_EQ(extract_ok(src), "first\n\\raw{}");
  EXPECT_EQ(extract_ok("PROMPT_TEMPLATE = 'a' \"b\" \\\n    'c'\n"), "abc");
}

TEST(PromptExtract, CrLfSourceReadsAsLf) {
  EXPECT_EQ(extract_ok("import os\r\nPROMPT_TEMPLATE = \"\"\"a\r\n{}\rb\"\"\"\r\n"), "a\n{}\nb");
}

TEST(PromptExtract, AnnotatedAndLastAssignmentWins) {
  EXPECT_EQ(extract_ok("PROMPT_TEMPLATE: str = 'one'\nPROMPT_TEMPLATE = 'two'\nPROMPT_TEMPLATE.format('x')\n"),
            "two");
}

TEST(PromptExtract, MissingTemplateIsNotFound) {
  auto r = extract_prompt_template("HF_MODEL = 'x'\n    PROMPT_TEMPLATE = 'indented'\n", "m/kernelllm.py");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("m/kernelllm.py"), std::string::npos);
}

TEST(PromptExtract, NonLiteralValuesAreParseErrors) {
  for (std::string_view src : {"PROMPT_TEMPLATE = f'{x}'\n", "PROMPT_TEMPLATE = b'x'\n",
                               "PROMPT_TEMPLATE = 'x'.strip()\n", "PROMPT_TEMPLATE = load()\n",
                               "PROMPT_TEMPLATE = 'a' + 'b'\n", "PROMPT_TEMPLATE += 'a'\n",
                               "PROMPT_TEMPLATE = 'unterminated\n", "PROMPT_TEMPLATE = \"\"\"never closed\n",
                               "PROMPT_TEMPLATE = ('a'\n", "PROMPT_TEMPLATE = '\\N{BULLET}'\n",
                               "PROMPT_TEMPLATE = '\\x4'\n"}) {
    auto r = extract_prompt_template(src, "kernelllm.py");
    ASSERT_FALSE(r.ok()) << src;
    EXPECT_EQ(r.status().code(), ErrorCode::parse_error) << src << " -> " << r.status().to_string();
  }
}

TEST(PromptFormat, UserCodeBracesAreInsertedVerbatim) {
  auto r = format_triton_prompt("<|begin_of_text|>A\n```\n{}\n```\nB", "d = {'k': 1}\nf'{d}' }{ {{}}");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<|begin_of_text|>A\n```\nd = {'k': 1}\nf'{d}' }{ {{}}\n```\nB");
}

TEST(PromptFormat, DoubledBracesAndIndexZeroFollowPythonFormat) {
  auto r = format_triton_prompt("x = {{1: 2}} {0} and {0}}}", "C");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "x = {1: 2} C and C}");
}

TEST(PromptFormat, OtherFieldsAndUnmatchedBracesAreErrors) {
  for (std::string_view t : {"{code}", "{1}", "{} {}", "{} {0}", "{!r}", "{:>4}", "a } b", "a { b", "a {", "{{ no field }}"}) {
    auto r = format_triton_prompt(t, "C");
    ASSERT_FALSE(r.ok()) << t;
    EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument) << t;
  }
}

TEST(PromptBuiltin, HasKernelLlmTemplateShape) {
  std::string_view t = builtin_prompt_template();
  EXPECT_EQ(t.substr(0, 18), "\n<|begin_of_text|>");
  for (std::string_view needle : {"return a + b", "@triton.jit", "def add_kernel(", "class ModelNew(nn.Module)",
                                  "ModelNew", "NO testing code"}) {
    EXPECT_NE(t.find(needle), std::string_view::npos) << needle;
  }
  // The example comes before the user's module, the request after it.
  size_t example = t.find("def add_kernel(");
  size_t field = t.find("{}");
  ASSERT_NE(field, std::string_view::npos);
  EXPECT_LT(example, field);
  EXPECT_GT(t.rfind("ModelNew"), field);
  auto r = format_triton_prompt(t, "class Model: pass");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->find("```\nclass Model: pass\n```"), std::string::npos);
  EXPECT_EQ(r->size(), t.size() - 2 + 17);
}

class PromptLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kllm_prompt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(PromptLoad, BuiltinWhenNoScript) {
  auto r = load_prompt_template(dir_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->source, "built-in");
  EXPECT_EQ(r->text, builtin_prompt_template());
  auto none = load_prompt_template({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->source, "built-in");
}

TEST_F(PromptLoad, ScriptTemplateThenOverrideFile) {
  write("kernelllm.py", "import torch\nPROMPT_TEMPLATE = \"\"\"\n<|begin_of_text|>from script {}\n\"\"\"\n");
  auto r = load_prompt_template(dir_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->text, "\n<|begin_of_text|>from script {}\n");
  EXPECT_EQ(r->source, (dir_ / "kernelllm.py").string());
  write("mine.txt", "raw \\n text {}");
  auto o = load_prompt_template(dir_, dir_ / "mine.txt");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->text, "raw \\n text {}");
}

TEST_F(PromptLoad, ScriptWithoutTemplateAndMissingOverrideAreErrors) {
  write("kernelllm.py", "HF_MODEL = 'facebook/KernelLLM'\n");
  auto r = load_prompt_template(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("PROMPT_TEMPLATE"), std::string::npos);
  auto o = load_prompt_template(dir_, dir_ / "absent.txt");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), ErrorCode::not_found);
}

}  // namespace
}  // namespace kernelllm
