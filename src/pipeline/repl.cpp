// The REPL (repl.h): input reading (fd or stream, Ctrl+C aware), the `:` commands, sample 0
// streamed through a wrapper around the CompletionSource, then optimize() and its table.
// Printing only talks to the given ostream; the loop's state is the settings and the last best.
#include "kernelllm/pipeline/repl.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <istream>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#ifdef KERNELLLM_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "kernelllm/pipeline/extract.h"
#include "kernelllm/pipeline/prompt.h"

namespace kernelllm {
namespace {

constexpr std::string_view kDefaultModuleCode = R"(import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales x, adds a bias and applies a leaky ReLU."""

    def __init__(self, scale: float = 2.0, slope: float = 0.1):
        super().__init__()
        self.scale = scale
        self.slope = slope

    def forward(self, x, bias):
        return torch.nn.functional.leaky_relu(x * self.scale + bias, self.slope)


def get_inputs():
    return [torch.randn(64, 4096), torch.randn(4096)]


def get_init_inputs():
    return []
)";

// ---- Ctrl+C ---------------------------------------------------------------------------------
// A handler sets a flag that generation (through the stream callback) and the input reader
// poll. A second Ctrl+C before the first was taken restores the previous disposition and
// re-raises, so a stuck step can still be interrupted the usual way.
std::atomic<bool> g_sigint{false};
struct sigaction g_previous_sigint;

extern "C" void on_sigint(int) {
  if (g_sigint.exchange(true)) {
    sigaction(SIGINT, &g_previous_sigint, nullptr);
    raise(SIGINT);
  }
}

bool take_sigint() { return g_sigint.exchange(false); }

class SigintGuard {
 public:
  explicit SigintGuard(bool enable) : active_(enable) {
    if (!active_) return;
    g_sigint = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR
    sigaction(SIGINT, &sa, &g_previous_sigint);
  }
  ~SigintGuard() {
    if (active_) sigaction(SIGINT, &g_previous_sigint, nullptr);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  bool active_;
};

// ---- readers --------------------------------------------------------------------------------
class FdLineReader final : public LineReader {
 public:
  explicit FdLineReader(int fd) : fd_(fd), is_tty_(::isatty(fd) == 1) {}

  ReadStatus read_line(std::string& line) override {
    for (;;) {
      if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return ReadStatus::line;
      }
      if (take_sigint()) {
        buf_.clear();
        return ReadStatus::interrupted;
      }
      // Short polls so that a SIGINT delivered to another thread is still noticed.
      pollfd p{fd_, POLLIN, 0};
      int ready = ::poll(&p, 1, 100);
      if (ready < 0 && errno != EINTR) return ReadStatus::closed;
      if (ready <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return ReadStatus::closed;
      }
      if (n == 0) {
        // A hung-up terminal reads 0 for ever: that is the end, not another Ctrl+D.
        if (buf_.empty()) return (p.revents & POLLHUP) != 0 && is_tty_ ? ReadStatus::closed : ReadStatus::eof;
        line = std::move(buf_);
        buf_.clear();
        return ReadStatus::line;
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  bool is_tty_;
  std::string buf_;  // bytes read past the last returned line
};

#ifdef KERNELLLM_HAVE_LIBEDIT
// Standard input at a terminal with line editing and history through libedit (BSD licence;
// readline's API, which reads stdin).
// History persists in $XDG_STATE_HOME/kernelllm/history, else ~/.kernelllm_history. Ctrl+C
// interrupts libedit's read (our handler has no SA_RESTART); the line is then discarded.
class EditLineReader final : public LineReader {
 public:
  explicit EditLineReader(int fd) : fd_(fd), history_file_(history_path()) {
    rl_catch_signals = 0;  // run_repl's SIGINT handler stays the one in charge
    using_history();
    stifle_history(1000);
    if (!history_file_.empty()) read_history(history_file_.c_str());
  }
  bool set_prompt(const std::string& prompt) override {
    prompt_ = prompt;
    return true;
  }

  ReadStatus read_line(std::string& line) override {
    char* raw = ::readline(prompt_.c_str());
    prompt_.clear();  // the lines after the first of an input: no prompt (pasted code)
    if (take_sigint()) {
      std::free(raw);
      return ReadStatus::interrupted;
    }
    if (raw == nullptr) {
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 0);
      return (p.revents & POLLHUP) != 0 ? ReadStatus::closed : ReadStatus::eof;
    }
    line = raw;
    std::free(raw);
    if (line.find_first_not_of(" \t") != std::string::npos) {
      add_history(line.c_str());
      if (!history_file_.empty()) write_history(history_file_.c_str());
    }
    return ReadStatus::line;
  }

 private:
  static std::string history_path() {
    if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state) {
      std::error_code ec;
      std::filesystem::path dir = std::filesystem::path(state) / "kernelllm";
      std::filesystem::create_directories(dir, ec);
      return ec ? std::string() : (dir / "history").string();
    }
    const char* home = std::getenv("HOME");
    return home && *home ? (std::filesystem::path(home) / ".kernelllm_history").string() : std::string();
  }
  int fd_;
  std::string history_file_;
  std::string prompt_;
};
#endif

class StreamLineReader final : public LineReader {
 public:
  explicit StreamLineReader(std::istream& in) : in_(in) {}
  ReadStatus read_line(std::string& line) override {
    if (std::getline(in_, line)) return ReadStatus::line;
    return in_.bad() ? ReadStatus::closed : ReadStatus::eof;
  }

 private:
  std::istream& in_;
};

// ---- streaming ------------------------------------------------------------------------------
// Wraps the real source: prints sample 0 as it is written, then one throughput line for all
// samples, and turns Ctrl+C into a cancelled generation (an error optimize() passes back).
class StreamingSource final : public CompletionSource {
 public:
  StreamingSource(CompletionSource& inner, std::ostream& out) : inner_(inner), out_(out) {}

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                            const SamplingParams& sampling, const StreamCallback& on_text,
                                            GenerateStats* stats) override {
    return complete_each(prompt, n, max_new_tokens, sampling, on_text, {}, stats);
  }

  Result<std::vector<std::string>> complete_each(const std::string& prompt, int n, int max_new_tokens,
                                                 const SamplingParams& sampling, const StreamCallback& on_text,
                                                 const CompletionDone& on_done, GenerateStats* stats) override {
    out_ << fmt::format("--- generating {} sample{} (temperature {:g}, seed {}); sample 0 as it is written:\n", n,
                        n == 1 ? "" : "s", sampling.temperature, sampling.seed);
    out_.flush();
    bool ends_with_newline = true;
    auto stream = [&](int32_t sample, std::string_view text) {
      if (g_sigint.load()) {
        cancelled_ = true;
        return false;
      }
      if (sample == 0 && !text.empty()) {
        out_ << text;
        out_.flush();
        ends_with_newline = text.back() == '\n';
      }
      return on_text ? on_text(sample, text) : true;
    };
    GenerateStats local;
    auto start = std::chrono::steady_clock::now();
    auto result = inner_.complete_each(prompt, n, max_new_tokens, sampling, stream, on_done, &local);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!ends_with_newline) out_ << '\n';
    if (stats != nullptr) {
      stats->prompt_tokens += local.prompt_tokens;
      stats->generated_tokens += local.generated_tokens;
      stats->prefill_ms += local.prefill_ms;
      stats->decode_ms += local.decode_ms;
    }
    if (cancelled_) return error(ErrorCode::io_error, "generation cancelled (Ctrl+C)");
    if (result.ok()) {
      double tok_s = seconds > 0 ? static_cast<double>(local.generated_tokens) / seconds : 0.0;
      out_ << fmt::format("--- {} sample{}: {} tokens in {:.1f} s ({:.1f} tokens/s over all samples; prompt {} tokens)\n",
                          n, n == 1 ? "" : "s", local.generated_tokens, seconds, tok_s, local.prompt_tokens);
    }
    out_.flush();
    return result;
  }
  std::string describe() const override { return inner_.describe(); }
  bool cancelled() const { return cancelled_; }

 private:
  CompletionSource& inner_;
  std::ostream& out_;
  bool cancelled_ = false;
};

// ---- the loop -------------------------------------------------------------------------------
std::string one_line(std::string s, size_t width) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  return static_cast<bool>(f);
}

constexpr std::string_view kCommandHelp =
    "Commands (typed at the start of an input):\n"
    "  :k N        samples per module (now {k})\n"
    "  :temp T     sampling temperature, 0 = greedy (now {temp:g})\n"
    "  :save FILE  write the last best verified candidate to FILE\n"
    "  :help       this list\n"
    "  :quit       leave (also `exit`)\n";

class Repl {
 public:
  Repl(CompletionSource& source, const ReplOptions& options, LineReader& in, std::ostream& out)
      : source_(source), options_(options), in_(in), out_(out), k_(options.k), temperature_(options.sampling.temperature) {}

  Status run() {
    if (Status s = prepare_work_root(); !s.ok()) return s;
    print_banner();
    for (;;) {
      prompt();
      std::optional<std::string> code;
      Next next = read_input(code);
      if (next == Next::quit) break;
      if (next == Next::again) continue;
      handle_module(*code);
      if (!options_.interactive) break;
    }
    out_.flush();
    if (!out_) return error(ErrorCode::io_error, "REPL output: write failed");
    return {};
  }

 private:
  enum class Next { module, again, quit };

  // A line-editing reader draws the prompt itself (so that it can redraw the line).
  void prompt() {
    if (!in_.set_prompt(">>> ")) out_ << ">>> ";
    out_.flush();
  }

  Status prepare_work_root() {
    work_root_ = options_.work_root;
    if (work_root_.empty()) {
      std::string pattern = (std::filesystem::temp_directory_path() / "kernelllm-repl-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) {
        return error(ErrorCode::io_error, "cannot create a work directory from " + pattern);
      }
      work_root_ = pattern;
    }
    std::error_code ec;
    std::filesystem::create_directories(work_root_, ec);
    if (ec) return error(ErrorCode::io_error, work_root_.string() + ": cannot create the work directory: " + ec.message());
    return {};
  }

  void print_banner() {
    out_ << "kernelllm REPL: " << source_.describe() << "\n"
         << "Paste or type a PyTorch module (a `Model(nn.Module)` class with `get_inputs()` and\n"
         << "`get_init_inputs()` functions), then press Ctrl+D. KernelLLM writes k Triton versions\n"
         << "(`ModelNew`), streams the first, and "
         << (options_.verify_enabled ? "verifies them all against your module." : "extracts them (verification is off).")
         << "\nAn empty input uses a built-in example. Ctrl+C cancels a generation or a verification.\n"
         << fmt::format(fmt::runtime(kCommandHelp), fmt::arg("k", k_), fmt::arg("temp", temperature_))
         << "Work directory: " << work_root_.string() << "\n\n";
    out_.flush();
  }

  // Reads one input: commands at its start are handled at once; lines up to EOF are the code.
  Next read_input(std::optional<std::string>& code) {
    std::string text;
    bool started = false;
    std::string line;
    for (;;) {
      ReadStatus st = in_.read_line(line);
      if (st == ReadStatus::interrupted) {
        out_ << "\n(input discarded; :quit to leave)\n";
        return Next::again;
      }
      if (st == ReadStatus::closed) return Next::quit;
      if (st == ReadStatus::eof) {
        // A terminal closed on an empty input is the user's built-in-example request; a pipe
        // that ends without code is too, once (it is not interactive, so the loop ends after).
        code = std::move(text);
        return Next::module;
      }
      if (!started) {
        std::string_view t = trim(line);
        if (t.empty()) continue;
        if (t == "exit" || t == "quit") return Next::quit;
        if (t.front() == ':') {
          if (!handle_command(t)) return Next::quit;
          prompt();
          continue;
        }
        started = true;
      }
      text += line;
      text += '\n';
    }
  }

  // False: quit.
  bool handle_command(std::string_view t) {
    std::istringstream words{std::string(t)};
    std::string cmd, arg, extra;
    words >> cmd >> arg >> extra;
    auto say = [&](const std::string& s) {
      out_ << s << '\n';
      out_.flush();
    };
    if (cmd == ":quit" || cmd == ":q" || cmd == ":exit") return false;
    if (cmd == ":help") {
      out_ << fmt::format(fmt::runtime(kCommandHelp), fmt::arg("k", k_), fmt::arg("temp", temperature_));
      return true;
    }
    if (cmd == ":k") {
      char* end = nullptr;
      long v = arg.empty() ? 0 : std::strtol(arg.c_str(), &end, 10);
      if (arg.empty() || *end != '\0' || v < 1 || v > 4096 || !extra.empty()) {
        say(fmt::format(":k expects one whole number of samples from 1 to 4096, found '{}'", trim(t.substr(2))));
      } else {
        k_ = static_cast<int>(v);
        say(fmt::format("k = {}", k_));
      }
      return true;
    }
    if (cmd == ":temp") {
      char* end = nullptr;
      double v = arg.empty() ? -1 : std::strtod(arg.c_str(), &end);
      if (arg.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || !extra.empty()) {
        say(fmt::format(":temp expects one temperature >= 0 (0 = greedy), found '{}'", trim(t.substr(5))));
      } else {
        temperature_ = static_cast<float>(v);
        say(fmt::format("temperature = {:g}", temperature_));
      }
      return true;
    }
    if (cmd == ":save") {
      std::string file{trim(t.substr(5))};
      if (file.empty()) {
        say(":save expects a file name, e.g. :save best.py");
      } else if (!best_code_) {
        say("nothing to save: no verified correct candidate yet" +
            std::string(modules_ > 0 ? " (the last module had none)" : ""));
      } else {
        say(write_file(file, *best_code_) ? fmt::format("saved {} to {}", best_label_, file) : fmt::format(":save: cannot write {}", file));
      }
      return true;
    }
    say(fmt::format("unknown command '{}'; commands: :k N, :temp T, :save FILE, :help, :quit", cmd));
    return true;
  }

  void handle_module(std::string code) {
    if (trim(code).empty()) {
      out_ << "No code given; using the built-in example:\n" << default_module_code() << '\n';
      code = std::string(default_module_code());
    }
    if (Status s = check_module_code(code); !s.ok()) {
      out_ << "error: " << s.message() << "\n\n";
      out_.flush();
      return;
    }
    ++modules_;
    best_code_.reset();
    std::filesystem::path work_dir = work_root_ / fmt::format("module-{}", modules_);
    uint64_t seed = options_.seed ? *options_.seed : std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
    SamplingParams sampling = options_.sampling;
    sampling.temperature = temperature_;
    sampling.seed = seed;
    std::string tmpl = options_.prompt_template.empty() ? std::string(builtin_prompt_template()) : options_.prompt_template;
    out_ << fmt::format("module {}: k = {}, work dir {}\n", modules_, k_, work_dir.string());
    out_.flush();
    g_sigint = false;
    StreamingSource streaming(source_, out_);
    if (options_.verify_enabled) {
      run_optimize(code, streaming, sampling, tmpl, work_dir);
    } else {
      run_generate_only(code, streaming, sampling, tmpl, work_dir);
    }
    take_sigint();
    out_ << '\n';
    out_.flush();
  }

  void run_optimize(const std::string& code, StreamingSource& streaming, const SamplingParams& sampling,
                    const std::string& tmpl, const std::filesystem::path& work_dir) {
    OptimizeOptions o;
    o.k = k_;
    o.max_new_tokens = options_.max_new_tokens;
    o.sampling = sampling;
    o.rounds = options_.rounds;
    o.prompt_template = tmpl;
    o.work_dir = work_dir;
    o.verify = options_.verify;
    // The judges of one module's verification serve the next module's (ended when the REPL ends).
    o.verify.reuse_judges = true;
    // Sample 0 is printed as it is written: verdict lines of samples verified meanwhile would cut
    // into it, so the REPL verifies once every sample is written.
    o.verify_while_generating = false;
    // Ctrl+C stops verification too: its workers give up at their next wait.
    if (options_.handle_sigint) o.verify.cancel = &g_sigint;
    bool announced = false;
    auto progress = [&](const OptimizeEvent& ev) {
      if (ev.kind != OptimizeEventKind::candidate_verified) return;
      if (!announced) {
        out_ << "--- verifying (" << ev.total << " candidates)\n";
        announced = true;
      }
      out_ << fmt::format("  [{}/{}] {}\n", ev.verified, ev.total, ev.line);
      out_.flush();
    };
    auto result = optimize(code, streaming, o, progress);
    if (!result.ok()) {
      if (streaming.cancelled()) {
        out_ << "generation cancelled; back to the prompt\n";
      } else if (g_sigint.load()) {
        out_ << "verification cancelled; back to the prompt\n";
      } else {
        out_ << "error: " << result.status().to_string() << "\n";
      }
      return;
    }
    std::filesystem::path report = work_dir / "report.json";
    report_note_ = write_file(report, result->to_json().dump(2, ' ', false, Json::error_handler_t::replace) + "\n")
                       ? " (full report: " + report.string() + ")"
                       : " (could not write " + report.string() + ")";
    print_table(*result);
  }

  void print_table(const OptimizeResult& r) {
    bool rounds = options_.rounds > 1;
    out_ << fmt::format("\n{:<8} {:<18} {:>9}  {}\n", "sample", "verdict", "speedup", "rule / message");
    out_ << std::string(90, '-') << '\n';
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      const OptimizeCandidate& c = r.candidates[i];
      std::string label = rounds ? fmt::format("{}.{}", c.round, c.sample) : std::to_string(c.sample);
      if (r.best && *r.best == i) label += " *";
      std::string speed = c.result.speedup > 0 ? fmt::format("{:.2f}x", c.result.speedup) : "-";
      std::string reason = c.result.rule.empty() ? c.result.message : c.result.rule + ": " + c.result.message;
      out_ << fmt::format("{:<8} {:<18} {:>9}  {}\n", label, harness::verdict_name(c.result.verdict), speed,
                          one_line(reason, 80));
    }
    if (!r.best) {
      out_ << "\nno correct candidate; the reasons are in the table" << report_note_ << ".\n";
      out_.flush();
      return;
    }
    const OptimizeCandidate& best = r.candidates[*r.best];
    best_code_ = best.code;
    best_label_ = rounds ? fmt::format("round {} sample {}", best.round, best.sample) : fmt::format("sample {}", best.sample);
    bool meaningful = best.result.timing && best.result.timing->meaningful;
    out_ << fmt::format("\nbest: {} ({}) {}\n", best_label_, harness::verdict_name(best.result.verdict),
                        meaningful ? fmt::format("{:.2f}x faster than the reference", best.result.speedup)
                                   : std::string("(timing not meaningful here)"));
    if (!r.selection_reason.empty()) out_ << "selection: " << r.selection_reason << report_note_ << '\n';
    out_ << "file: " << best.file.string() << "  (:save FILE to copy it)\n" << best.code;
    out_.flush();
  }

  // Without verification: the module and each extracted candidate still go to the work dir.
  void run_generate_only(const std::string& code, StreamingSource& streaming, const SamplingParams& sampling,
                         const std::string& tmpl, const std::filesystem::path& work_dir) {
    auto prompt = format_triton_prompt(tmpl, code);
    if (!prompt.ok()) {
      out_ << "error: " << prompt.status().to_string() << '\n';
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(work_dir, ec);
    if (ec || !write_file(work_dir / "problem.py", code)) {
      out_ << "error: " << work_dir.string() << ": cannot write problem.py\n";
      return;
    }
    auto texts = streaming.complete(*prompt, k_, options_.max_new_tokens, sampling, {}, nullptr);
    if (!texts.ok()) {
      out_ << (streaming.cancelled() ? "generation cancelled; back to the prompt\n" : "error: " + texts.status().to_string() + "\n");
      return;
    }
    out_ << fmt::format("\n{:<8} {:<20} {:<16} {}\n", "sample", "extracted from", "defines ModelNew", "lines");
    for (size_t i = 0; i < texts->size(); ++i) {
      ExtractedCode x = extract_model_new((*texts)[i]);
      std::filesystem::path file = work_dir / fmt::format("sample{}.py", i);
      if (!write_file(file, x.code)) out_ << "error: cannot write " << file.string() << '\n';
      size_t lines = static_cast<size_t>(std::count(x.code.begin(), x.code.end(), '\n'));
      out_ << fmt::format("{:<8} {:<20} {:<16} {}\n", i, x.how, x.defines_model_new ? "yes" : "no", lines);
    }
    out_ << "(verification is off: candidates are in " << work_dir.string() << ", none is verified)\n";
  }

  CompletionSource& source_;
  const ReplOptions& options_;
  LineReader& in_;
  std::ostream& out_;
  std::filesystem::path work_root_;
  int k_;
  float temperature_;
  int modules_ = 0;
  std::optional<std::string> best_code_;
  std::string best_label_;
  std::string report_note_;  // where the last module's report.json went
};

bool has_top_level(std::string_view code, std::string_view prefix, std::string_view followers) {
  size_t pos = 0;
  while (pos <= code.size()) {
    size_t end = code.find('\n', pos);
    std::string_view line = code.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    if (line.starts_with(prefix) && line.size() > prefix.size() &&
        followers.find(line[prefix.size()]) != std::string_view::npos) {
      return true;
    }
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return false;
}

}  // namespace

std::string_view default_module_code() { return kDefaultModuleCode; }

Status check_module_code(std::string_view code) {
  std::vector<std::string> missing;
  if (!has_top_level(code, "class Model", "(: ")) missing.emplace_back("`class Model`");
  if (!has_top_level(code, "def get_inputs", "( ")) missing.emplace_back("`def get_inputs()`");
  if (!has_top_level(code, "def get_init_inputs", "( ")) missing.emplace_back("`def get_init_inputs()`");
  if (missing.empty()) return {};
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
  return error(ErrorCode::invalid_argument,
               "expected a KernelBench-style module with a top-level `class Model`, `def get_inputs()` and "
               "`def get_init_inputs()`; missing: " + list);
}

std::unique_ptr<LineReader> make_fd_line_reader(int fd) {
#ifdef KERNELLLM_HAVE_LIBEDIT
  // Line editing for a person at a terminal (it draws the line on stdout); pipes keep the plain reader.
  if (fd == STDIN_FILENO && ::isatty(fd) == 1 && ::isatty(STDOUT_FILENO) == 1 &&
      std::getenv("KERNELLLM_NO_LINE_EDIT") == nullptr) {
    return std::make_unique<EditLineReader>(fd);
  }
#endif
  return std::make_unique<FdLineReader>(fd);
}
std::unique_ptr<LineReader> make_stream_line_reader(std::istream& in) { return std::make_unique<StreamLineReader>(in); }

Status run_repl(CompletionSource& source, const ReplOptions& options, LineReader& in, std::ostream& out) {
  if (options.k < 1) return error(ErrorCode::invalid_argument, fmt::format("k: expected at least 1, found {}", options.k));
  if (Status s = validate(options.sampling); !s.ok()) return s;
  SigintGuard guard(options.handle_sigint);
  // The judges the modules' verifications kept for one another end with the session.
  harness::EndKeptJudgesAtExit end_kept_judges;
  Repl repl(source, options, in, out);
  return repl.run();
}

}  // namespace kernelllm
