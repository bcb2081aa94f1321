// The REPL with verification on CPU (Triton interpreter in the verifier's workers) and scripted
// completions wrapping tests/cases/add candidates: the table shows the correct and the wrong
// verdict, the best is printed, and `:save` writes it (the path a tiny random model never reaches).
#include "kernelllm/pipeline/repl.h"

#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(__FILE__).parent_path().parent_path() / "cases";

std::string read(const fs::path& p) {
  auto r = read_text_file(p);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

class TwoCandidates final : public CompletionSource {
 public:
  TwoCandidates(std::string wrong, std::string correct) : wrong_(std::move(wrong)), correct_(std::move(correct)) {}
  Result<std::vector<std::string>> complete(const std::string&, int n, int, const SamplingParams&,
                                            const StreamCallback& on_text, GenerateStats*) override {
    if (n != 2) return error(ErrorCode::invalid_argument, "TwoCandidates: asked for " + std::to_string(n));
    std::vector<std::string> texts = {"```python\n" + wrong_ + "```\n", "Here it is:\n```python\n" + correct_ + "```\n"};
    for (int i = 0; i < 2; ++i) {
      if (on_text && !on_text(i, texts[static_cast<size_t>(i)])) return texts;
    }
    return texts;
  }
  std::string describe() const override { return "two candidates"; }

 private:
  std::string wrong_, correct_;
};

// A terminal stand-in: "<EOF>" lines are Ctrl+D.
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

TEST(ReplVerify, TableShowsVerdictsAndSaveWritesTheBest) {
  const std::string problem = read(kCases / "problems" / "add.py");
  const std::string correct = read(kCases / "add" / "correct_basic.py");
  const std::string wrong = read(kCases / "add" / "wrong_first_input_twice.py");
  ASSERT_FALSE(problem.empty() || correct.empty() || wrong.empty());
  fs::path work = fs::temp_directory_path() / ("kernelllm-repl-verify-" + std::to_string(::getpid()));
  fs::remove_all(work);

  ReplOptions options;
  options.k = 2;
  options.seed = 1;
  options.work_root = work / "runs";
  options.interactive = true;
  options.verify.use_cache = false;
  options.verify.multishape = false;
  options.verify.n_trials = 2;
  options.verify.warmup = 1;
  options.verify.iters = 3;
  TwoCandidates source(wrong, correct);
  fs::path saved = work / "best.py";
  MarkerReader in(":save " + saved.string() + "\n" + problem + "<EOF>\n:save " + saved.string() + "\n:quit\n");
  std::ostringstream out;
  Status s = run_repl(source, options, in, out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::string text = out.str();

  EXPECT_NE(text.find("nothing to save: no verified correct candidate yet\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n0        wrong_output"), std::string::npos) << text;
  EXPECT_NE(text.find("\n1 *      correct"), std::string::npos) << text;
  EXPECT_NE(text.find("best: sample 1 (correct)"), std::string::npos) << text;
  EXPECT_NE(text.find("saved sample 1 to " + saved.string()), std::string::npos) << text;
  EXPECT_EQ(read(saved), correct);
  EXPECT_EQ(read(work / "runs" / "module-1" / "problem.py"), problem);
  EXPECT_TRUE(fs::exists(work / "runs" / "module-1" / "report.json"));
  fs::remove_all(work);
}

}  // namespace
}  // namespace kernelllm
