// The REPL loop (pipeline/repl.h) with a scripted CompletionSource and verification off: commands,
// the built-in example notice, the user's code in the prompt and work dir, streaming of sample 0,
// Ctrl+C during generation, terminal-style inputs one after another, and check_module_code.
#include "kernelllm/pipeline/repl.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

constexpr const char* kModule =
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
    "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n";

// Answers with fixed text per sample, streamed in two pieces; optionally raises SIGINT between them.
class ScriptedSource final : public CompletionSource {
 public:
  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int, const SamplingParams& sampling,
                                            const StreamCallback& on_text, GenerateStats* stats) override {
    prompts.push_back(prompt);
    ns.push_back(n);
    temperatures.push_back(sampling.temperature);
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      std::string first = "```python\nclass ModelNew:  # sample " + std::to_string(i) + "\n";
      std::string second = "    pass\n```\n";
      if (on_text && !on_text(i, first)) return out;
      if (raise_sigint) raise(SIGINT);
      if (on_text && !on_text(i, second)) return out;
      out.push_back(first + second);
    }
    if (stats != nullptr) stats->generated_tokens = 10 * n;
    return out;
  }
  std::string describe() const override { return "scripted"; }

  bool raise_sigint = false;
  std::vector<std::string> prompts;
  std::vector<int> ns;
  std::vector<float> temperatures;
};

class ReplTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kernelllm_repl_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    options_.verify_enabled = false;
    options_.prompt_template = "PROMPT[{}]";
    options_.work_root = dir_;
    options_.seed = 9;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string run(const std::string& input) {
    std::istringstream in(input);
    auto reader = make_stream_line_reader(in);
    std::ostringstream out;
    Status s = run_repl(source_, options_, *reader, out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out.str();
  }

  std::filesystem::path dir_;
  ReplOptions options_;
  ScriptedSource source_;
};

TEST_F(ReplTest, CommandsChangeKAndTemperatureAndUsersCodeIsThePrompt) {
  std::string out = run(":k 3\n:temp 0\n\n" + std::string(kModule));
  EXPECT_NE(out.find("k = 3"), std::string::npos) << out;
  EXPECT_NE(out.find("temperature = 0"), std::string::npos) << out;
  ASSERT_EQ(source_.prompts.size(), 1u);
  EXPECT_EQ(source_.prompts[0], "PROMPT[" + std::string(kModule) + "]");
  EXPECT_EQ(source_.ns[0], 3);
  EXPECT_EQ(source_.temperatures[0], 0.0f);
  EXPECT_EQ(read_text_file(dir_ / "module-1" / "problem.py").value(), kModule);
  EXPECT_EQ(read_text_file(dir_ / "module-1" / "sample2.py").value(), "class ModelNew:  # sample 2\n    pass\n");
  // Sample 0 streamed in full, the others not.
  EXPECT_NE(out.find("```python\nclass ModelNew:  # sample 0\n    pass\n```\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("```python\nclass ModelNew:  # sample 1"), std::string::npos) << out;
  EXPECT_NE(out.find("--- 3 samples: 30 tokens in"), std::string::npos) << out;
  EXPECT_EQ(out.find("No code given"), std::string::npos);
}

TEST_F(ReplTest, BadCommandsSayWhatWasExpected) {
  std::string out = run(":k 0\n:k 2 3\n:temp x\n:frobnicate\n:save\n:save f.py\n:quit\n");
  EXPECT_NE(out.find(":k expects one whole number of samples from 1 to 4096, found '0'"), std::string::npos) << out;
  EXPECT_NE(out.find("found '2 3'"), std::string::npos) << out;
  EXPECT_NE(out.find(":temp expects one temperature >= 0 (0 = greedy), found 'x'"), std::string::npos) << out;
  EXPECT_NE(out.find("unknown command ':frobnicate'"), std::string::npos) << out;
  EXPECT_NE(out.find(":save expects a file name"), std::string::npos) << out;
  EXPECT_NE(out.find("nothing to save: no verified correct candidate yet\n"), std::string::npos) << out;
  EXPECT_TRUE(source_.prompts.empty());
}

TEST_F(ReplTest, EmptyInputUsesTheExampleAndSaysSo) {
  std::string out = run("\n   \n");
  EXPECT_NE(out.find("No code given; using the built-in example:\n" + std::string(default_module_code())),
            std::string::npos)
      << out;
  ASSERT_EQ(source_.prompts.size(), 1u);
  EXPECT_EQ(source_.prompts[0], "PROMPT[" + std::string(default_module_code()) + "]");
}

TEST_F(ReplTest, ExitAtTheStartOfAnInputQuitsWithoutGenerating) {
  run("exit\n" + std::string(kModule));
  EXPECT_TRUE(source_.prompts.empty());
}

TEST_F(ReplTest, CodeWithoutModelIsRejectedBeforeGenerating) {
  std::string out = run("def f(x):\n    return x\n");
  EXPECT_NE(out.find("missing: `class Model`, `def get_inputs()`, `def get_init_inputs()`"), std::string::npos) << out;
  EXPECT_TRUE(source_.prompts.empty());
}

TEST_F(ReplTest, CtrlCDuringGenerationCancelsIt) {
  source_.raise_sigint = true;
  std::string out = run(kModule);
  EXPECT_NE(out.find("generation cancelled; back to the prompt"), std::string::npos) << out;
  EXPECT_EQ(out.find("extracted from"), std::string::npos) << out;
}

TEST_F(ReplTest, InteractiveGoesOnAfterEachModuleUntilQuit) {
  options_.interactive = true;
  // A terminal's Ctrl+D ends one input and reading goes on: a reader that reports EOF at a marker.
  std::string script = std::string(kModule);
  class MarkerReader final : public LineReader {
   public:
    explicit MarkerReader(std::string text) : in_(std::move(text)) {}
    ReadStatus read_line(std::string& line) override {
      if (!std::getline(in_, line)) return ReadStatus::closed;
      return line == "<EOF>" ? ReadStatus::eof : ReadStatus::line;
    }

   private:
    std::istringstream in_;
  };
  MarkerReader reader(script + "<EOF>\n:k 2\n" + script + "<EOF>\n:quit\n");
  std::ostringstream out;
  ASSERT_TRUE(run_repl(source_, options_, reader, out).ok());
  EXPECT_EQ(source_.ns, (std::vector<int>{10, 2}));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "module-2" / "problem.py"));
}

TEST(CheckModuleCode, NeedsModelAndBothInputFunctionsAtTopLevel) {
  EXPECT_TRUE(check_module_code(kModule).ok());
  EXPECT_TRUE(check_module_code(default_module_code()).ok());
  Status s = check_module_code("class ModelNew(nn.Module):\n    pass\ndef get_inputs():\n    pass\n");
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.message().find("missing: `class Model`, `def get_init_inputs()`"), std::string::npos) << s.message();
  EXPECT_FALSE(check_module_code("    class Model(nn.Module):\ndef get_inputs(): ...\ndef get_init_inputs(): ...\n").ok());
}

}  // namespace
}  // namespace kernelllm
