// The interactive loop behind `kernelllm repl`, `python -m kernelllm` and KernelLLM.run_repl():
// read a PyTorch module until EOF (Ctrl+D), stream the generation of k candidates, verify them
// (optimize()) and show a table and the best one; `:k`, `:temp`, `:save`, `:help`, `:quit`.
// One implementation; the CLI and the Python binding only open the engine and call run_repl.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/optimize.h"

namespace kernelllm {

// The built-in example (a KernelBench-style module: Model, get_inputs, get_init_inputs) that
// an empty input stands for. Ends with one newline.
std::string_view default_module_code();

// Whether `code` is a KernelBench-style module: a top-level `class Model`, `def get_inputs` and
// `def get_init_inputs`. invalid_argument naming what is missing otherwise.
Status check_module_code(std::string_view code);

enum class ReadStatus { line, eof, interrupted, closed };

// Where the REPL's input lines come from.
class LineReader {
 public:
  virtual ~LineReader() = default;
  // One line without its '\n' (a last line without one counts as a line), eof, interrupted
  // (Ctrl+C while waiting) or closed (a read error or hang-up: nothing more will come). After
  // eof a terminal may deliver more lines (Ctrl+D ends one input); a pipe or stream never.
  virtual ReadStatus read_line(std::string& line) = 0;
  // A reader that draws the prompt itself (line editing) keeps it for its next read_line and
  // returns true; the others return false and the caller prints it.
  virtual bool set_prompt(const std::string& prompt) {
    (void)prompt;
    return false;
  }
};
// Reads a file descriptor directly (no stdio buffering, so a terminal's EOF does not stick); a
// terminal (stdin and stdout) gets line editing and history when built with libedit (unless
// $KERNELLLM_NO_LINE_EDIT is set).
// Reports `interrupted` when SIGINT arrives during the wait while run_repl's handler is active.
std::unique_ptr<LineReader> make_fd_line_reader(int fd);
// Reads a std::istream (tests); never interrupted.
std::unique_ptr<LineReader> make_stream_line_reader(std::istream& in);

struct ReplOptions {
  int k = 10;
  int max_new_tokens = 2048;
  SamplingParams sampling = {kKernelLLMTemperature, kKernelLLMTopP, 0, 0};
  std::optional<uint64_t> seed;   // the same seed for every module; none: a fresh random one each
  int rounds = 1;
  std::string prompt_template;    // template text with one "{}" (load_prompt_template)
  std::filesystem::path work_root;  // module N's work dir is work_root/module-N; empty: a new temp dir
  harness::VerifyOptions verify;
  bool verify_enabled = true;     // false: generate and extract only (no verdicts, nothing to save)
  bool interactive = false;       // true (a terminal): go on after each module until :quit or exit
  bool handle_sigint = true;      // Ctrl+C cancels generation / discards the input being typed
};

// Runs until :quit/exit, the input closing, or the end of the first module when not
// interactive (an empty input is the built-in example, and says so). Per-module failures (a bad module, a verifier error) are printed and the loop
// goes on; only a failure to write `out` is returned as an error.
Status run_repl(CompletionSource& source, const ReplOptions& options, LineReader& in, std::ostream& out);

}  // namespace kernelllm
