// The optimize loop (see optimize.h): prompt → k samples in one generate call → each extracted
// candidate on disk and handed to the round's verifier as soon as the engine has written it
// (parallel workers, selection on) → the selected candidate; with rounds > 1, each failing candidate is sent back once per round with
// its verdict until something is correct.
#include "kernelllm/pipeline/optimize.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "kernelllm/pipeline/extract.h"
#include "kernelllm/pipeline/prompt.h"
#include "pipeline/refine.h"

namespace kernelllm {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kProgressIntervalS = 0.5;  // at most two "generating" events a second

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

Status write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return error(ErrorCode::io_error, path.string() + ": cannot write");
  return {};
}

Status make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error(ErrorCode::io_error, dir.string() + ": cannot create the directory: " + ec.message());
  return {};
}

// A top-level definition: a line starting with `keyword name` followed by '(' or ':'.
bool has_top_level(std::string_view code, std::string_view prefix) {
  size_t pos = 0;
  while (pos < code.size()) {
    size_t end = code.find('\n', pos);
    if (end == std::string_view::npos) end = code.size();
    std::string_view line = code.substr(pos, end - pos);
    if (line.starts_with(prefix) && line.size() > prefix.size()) {
      const char next = line[prefix.size()];
      if (next == '(' || next == ':' || next == ' ') return true;
    }
    pos = end + 1;
  }
  return false;
}

}  // namespace

Status validate_optimize_input(std::string_view module_code, const OptimizeOptions& o) {
  if (o.k < 1) return error(ErrorCode::invalid_argument, fmt::format("optimize: expected k >= 1, found {}", o.k));
  if (o.rounds < 1) return error(ErrorCode::invalid_argument, fmt::format("optimize: expected rounds >= 1, found {}", o.rounds));
  if (o.max_new_tokens < 1) {
    return error(ErrorCode::invalid_argument, fmt::format("optimize: expected max_new_tokens >= 1, found {}", o.max_new_tokens));
  }
  if (o.work_dir.empty()) return error(ErrorCode::invalid_argument, "optimize: expected a work directory, found none");
  KLLM_RETURN_IF_ERROR(validate(o.sampling));
  for (std::string_view def : {"class Model", "def get_inputs"}) {
    if (!has_top_level(module_code, def)) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("module: expected a top-level `{}` (KernelBench format: class Model, get_inputs(), "
                               "get_init_inputs()), found none",
                               def));
    }
  }
  return {};
}

namespace {

// Counts streamed pieces (one per token that completes text) and reports throttled progress.
class GenerationMeter {
 public:
  GenerationMeter(int round, const OptimizeProgress& progress) : round_(round), progress_(progress) {}

  StreamCallback callback() {
    return [this](int32_t, std::string_view) {
      ++pieces_;
      const double elapsed_s = ms_since(start_) / 1000.0;
      if (progress_ && elapsed_s - last_report_s_ >= kProgressIntervalS) {
        last_report_s_ = elapsed_s;
        emit(OptimizeEventKind::generating, pieces_, elapsed_s);
      }
      return true;
    };
  }

  // The source's token count when it keeps stats, else the streamed pieces.
  void finish(const GenerateStats& stats) {
    const int64_t tokens = stats.generated_tokens > 0 ? stats.generated_tokens : pieces_;
    if (progress_) emit(OptimizeEventKind::generated, tokens, ms_since(start_) / 1000.0);
  }

 private:
  void emit(OptimizeEventKind kind, int64_t tokens, double elapsed_s) const {
    OptimizeEvent e;
    e.kind = kind;
    e.round = round_;
    e.tokens = tokens;
    e.tokens_per_s = elapsed_s > 0 ? static_cast<double>(tokens) / elapsed_s : 0;
    progress_(e);
  }

  int round_;
  const OptimizeProgress& progress_;
  Clock::time_point start_ = Clock::now();
  double last_report_s_ = 0;
  int64_t pieces_ = 0;
};

void add_stats(GenerateStats& sum, const GenerateStats& s) {
  sum.prompt_tokens += s.prompt_tokens;
  sum.generated_tokens += s.generated_tokens;
  sum.prefill_ms += s.prefill_ms;
  sum.decode_ms += s.decode_ms;
}

// One request to the source: a prompt, how many samples, and which sample indices they become.
struct Request {
  std::string prompt;
  std::vector<int> samples;
  uint64_t seed = 0;
};

// A sample's completion, extracted and written to the round's directory.
Result<OptimizeCandidate> write_candidate(int round, int sample, std::string completion, const fs::path& dir) {
  OptimizeCandidate c;
  c.round = round;
  c.sample = sample;
  c.completion = std::move(completion);
  ExtractedCode code = extract_model_new(c.completion);
  c.code = std::move(code.code);
  c.extraction = std::move(code.how);
  c.defines_model_new = code.defines_model_new;
  c.file = fs::absolute(dir / fmt::format("sample{}.py", c.sample));
  c.completion_file = fs::absolute(dir / fmt::format("sample{}.completion.txt", c.sample));
  KLLM_RETURN_IF_ERROR(write_file(c.completion_file, c.completion));
  KLLM_RETURN_IF_ERROR(write_file(c.file, c.code));
  return c;
}

// Generates every request of a round, writes each completion and its extracted module, and hands
// each candidate to `ready` as soon as its completion is whole: the engine's while it still
// writes the others, other sources' once they return.
Status generate_round(int round, const std::vector<Request>& requests, CompletionSource& source, const OptimizeOptions& o,
                      const OptimizeProgress& progress, OptimizeResult& result,
                      const std::function<Status(OptimizeCandidate)>& ready) {
  const fs::path dir = o.work_dir / fmt::format("round{}", round);
  KLLM_RETURN_IF_ERROR(make_dir(dir));
  GenerationMeter meter(round, progress);
  GenerateStats round_stats;
  const auto t0 = Clock::now();
  for (const Request& req : requests) {
    if (round > 1) {
      KLLM_RETURN_IF_ERROR(write_file(dir / fmt::format("sample{}.prompt.txt", req.samples.front()), req.prompt));
    }
    SamplingParams sampling = o.sampling;
    sampling.seed = req.seed;
    GenerateStats stats;
    std::vector<bool> handed(req.samples.size(), false);
    Status failed;  // the first candidate that could not be written or handed over
    auto take = [&](int i, const std::string& text) {
      if (!failed.ok() || i < 0 || static_cast<size_t>(i) >= handed.size() || handed[static_cast<size_t>(i)]) return;
      handed[static_cast<size_t>(i)] = true;
      auto c = write_candidate(round, req.samples[static_cast<size_t>(i)], text, dir);
      failed = c.ok() ? ready(std::move(*c)) : c.status();
    };
    auto texts = source.complete_each(req.prompt, static_cast<int>(req.samples.size()), o.max_new_tokens, sampling,
                                      meter.callback(), take, &stats);
    if (!texts.ok()) return texts.status().with_context(fmt::format("round {}: generating with {}", round, source.describe()));
    if (texts->size() != req.samples.size()) {
      return error(ErrorCode::internal, fmt::format("round {}: expected {} completions from {}, found {}", round,
                                                    req.samples.size(), source.describe(), texts->size()));
    }
    for (size_t i = 0; i < texts->size(); ++i) take(static_cast<int>(i), (*texts)[i]);  // any not handed over yet
    KLLM_RETURN_IF_ERROR(failed);
    add_stats(round_stats, stats);
  }
  result.generate_ms += ms_since(t0);
  add_stats(result.generation, round_stats);
  meter.finish(round_stats);
  return {};
}

// A round's candidates in the order they reach the verifier (when streamed, the order the engine
// finished them), in slots sized up front: the verifier's on_result reads a slot while later
// ones are still being written.
struct RoundCandidates {
  std::vector<OptimizeCandidate> slots;
  size_t n = 0;
};

// The verifier's per-candidate results as progress events (candidate_verified).
class RoundProgress {
 public:
  RoundProgress(int round, const RoundCandidates& cands, const OptimizeOptions& o, const OptimizeProgress& progress,
                const OptimizeResult& result)
      : round_(round), cands_(cands), o_(o), progress_(progress) {
    for (const OptimizeCandidate& c : result.candidates) {
      if (c.result.verdict == harness::Verdict::correct) any_correct_ = true;
    }
  }

  std::function<void(size_t, const harness::CandidateResult&)> on_result() {
    return [this](size_t index, const harness::CandidateResult& r) {
      if (o_.verify.on_result) o_.verify.on_result(index, r);
      if (!progress_ || index >= cands_.slots.size()) return;
      std::lock_guard lock(mu_);
      ++verified_;
      OptimizeCandidate shown = cands_.slots[index];
      shown.result = r;
      if (r.verdict == harness::Verdict::correct) {
        any_correct_ = true;
        if (r.speedup > 0) best_speedup_ = std::max(best_speedup_.value_or(0.0), r.speedup);
      }
      OptimizeEvent e;
      e.kind = OptimizeEventKind::candidate_verified;
      e.round = round_;
      e.verified = verified_;
      e.total = static_cast<int>(cands_.slots.size());
      e.line = pipeline::verdict_line(shown, o_.rounds > 1);
      e.best_speedup = best_speedup_;
      e.any_correct = any_correct_;
      progress_(e);
    };
  }

 private:
  int round_;
  const RoundCandidates& cands_;
  const OptimizeOptions& o_;
  const OptimizeProgress& progress_;
  std::mutex mu_;  // on_result calls are serialized by the verifier; the lock documents the sharing
  int verified_ = 0;
  std::optional<double> best_speedup_;
  bool any_correct_ = false;
};

// The round's report (verify() of the candidates, or close() of a session they were streamed
// into) onto the candidates and the report-level fields; the selected candidate.
Result<std::optional<size_t>> take_report(int round, Result<harness::VerifyReport> report, std::vector<OptimizeCandidate>& cands,
                                          const OptimizeOptions& o, const OptimizeProgress& progress, OptimizeResult& result) {
  if (!report.ok()) {
    return report.status().with_context(fmt::format("round {}: verifying {} candidates (files kept in {})", round,
                                                    cands.size(), o.work_dir.string()));
  }
  for (size_t i = 0; i < cands.size() && i < report->candidates.size(); ++i) cands[i].result = report->candidates[i];
  result.sandbox = report->sandbox;
  result.environment = report->environment;
  result.reference_timing = report->reference_timing;
  result.selection_reason = report->selection_reason;
  result.verify_timelines_ms.push_back(report->timeline_ms);
  result.verify_judges_started += report->judges_started;
  result.verify_judges_reused += report->judges_reused;

  std::optional<size_t> selected = report->selected;
  if (!selected) {
    for (size_t i = 0; i < cands.size(); ++i) {
      if (cands[i].result.verdict == harness::Verdict::correct && (!selected || cands[i].sample < cands[*selected].sample)) {
        selected = i;
        result.selection_reason = "the first correct candidate (the verifier selected none)";
      }
    }
  }
  if (progress) {
    OptimizeEvent e;
    e.kind = OptimizeEventKind::round_done;
    e.round = round;
    e.verified = static_cast<int>(cands.size());
    e.total = static_cast<int>(cands.size());
    if (selected && cands[*selected].result.speedup > 0) e.best_speedup = cands[*selected].result.speedup;
    e.any_correct = selected.has_value();
    progress(e);
  }
  return selected;
}

// Distinct seeds per refinement sample: the base seed mixed with (round, sample).
uint64_t refinement_seed(uint64_t seed, int round, int sample) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(round) * 0x10000ull + static_cast<uint64_t>(sample) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Result<OptimizeResult> optimize(std::string_view module_code, CompletionSource& source, const OptimizeOptions& o,
                                const OptimizeProgress& progress) {
  KLLM_RETURN_IF_ERROR(validate_optimize_input(module_code, o));
  const std::string_view tmpl = o.prompt_template.empty() ? builtin_prompt_template() : std::string_view(o.prompt_template);
  KLLM_ASSIGN_OR_RETURN(std::string prompt, format_triton_prompt(tmpl, module_code));

  OptimizeResult result;
  result.source = source.describe();
  KLLM_RETURN_IF_ERROR(make_dir(o.work_dir));
  result.problem_file = fs::absolute(o.work_dir / "problem.py");
  result.prompt_file = fs::absolute(o.work_dir / "prompt.txt");
  KLLM_RETURN_IF_ERROR(write_file(result.problem_file, module_code));
  KLLM_RETURN_IF_ERROR(write_file(result.prompt_file, prompt));

  std::vector<Request> requests(1);
  requests[0].prompt = prompt;
  requests[0].seed = o.sampling.seed;
  for (int i = 0; i < o.k; ++i) requests[0].samples.push_back(i);

  // The engine's events (generating) and the verifier's (candidate_verified) come from different
  // threads while a round's samples are verified as they are written: one at a time to the caller.
  std::mutex progress_mu;
  OptimizeProgress serial;
  if (progress) {
    serial = [&](const OptimizeEvent& e) {
      std::lock_guard lock(progress_mu);
      progress(e);
    };
  }
  // Each round verifies the same problem: its verify call takes the judges the round before
  // released. They end with this call unless the caller keeps them for its own next calls (the
  // REPL sets verify.reuse_judges and ends them when it ends).
  const bool keep_judges = o.verify.reuse_judges || o.rounds > 1;
  harness::EndKeptJudgesAtExit end_kept(!o.verify.reuse_judges && o.rounds > 1);
  for (int round = 1; round <= o.rounds && !requests.empty(); ++round) {
    result.rounds_run = round;
    // The verifier gets ready (judges, the problem, workers) while the round's candidates are
    // generated, and verifies each as soon as it is written (verify_while_generating); if
    // generation fails, the session's destructor stops it.
    size_t expected = 0;
    for (const Request& r : requests) expected += r.samples.size();
    harness::VerifyOptions vo = o.verify;
    vo.select = true;
    vo.reuse_judges = keep_judges;
    // Declared before the session: its workers call round_progress (which reads `handed`) until
    // the session is gone, also when generation fails midway.
    RoundCandidates handed{std::vector<OptimizeCandidate>(expected), 0};
    RoundProgress round_progress(round, handed, o, serial, result);
    harness::VerifySession session(result.problem_file.string(), vo, expected);
    const bool stream = o.verify_while_generating;
    if (stream) KLLM_RETURN_IF_ERROR(session.start(round_progress.on_result(), expected));
    std::optional<Clock::time_point> first_handed;
    auto ready = [&](OptimizeCandidate c) -> Status {
      if (handed.n >= handed.slots.size()) {
        return error(ErrorCode::internal, fmt::format("round {}: more candidates than the {} asked for", round, expected));
      }
      handed.slots[handed.n] = std::move(c);
      if (stream) {
        if (!first_handed) first_handed = Clock::now();
        KLLM_ASSIGN_OR_RETURN(size_t index, session.add(handed.slots[handed.n].file.string()));
        if (index != handed.n) return error(ErrorCode::internal, "round candidates out of order with the verifier's");
      }
      ++handed.n;
      return {};
    };
    const double generated_before = result.generate_ms;
    {
      // While the engine writes on a GPU it holds that GPU's engine lock shared (harness::GpuShare):
      // no candidate is timed beside it (timing waits until it is done); correctness runs go on.
      std::optional<harness::GpuShare> engine_gpu;
      if (stream && !o.generation_gpu.empty()) engine_gpu.emplace(o.generation_gpu);
      KLLM_RETURN_IF_ERROR(generate_round(round, requests, source, o, serial, result, ready));
    }
    const double generation_ms = result.generate_ms - generated_before;
    // From the first candidate handed over to the end of generation: verification beside the engine.
    if (first_handed) result.verify_while_generating_ms += ms_since(*first_handed);
    const auto t_verify = first_handed.value_or(Clock::now());
    Result<harness::VerifyReport> report = error(ErrorCode::internal, "not verified");
    if (stream) {
      report = session.close();
    } else {
      std::vector<std::string> paths;
      for (size_t i = 0; i < handed.n; ++i) paths.push_back(handed.slots[i].file.string());
      report = session.verify(paths, round_progress.on_result());
    }
    result.verify_ms += ms_since(t_verify);
    result.verify_setup_ms += std::max(0.0, session.setup_ms());
    result.verify_setup_overlap_ms += std::min(std::max(0.0, session.setup_ms()), generation_ms);
    std::vector<OptimizeCandidate> cands(std::make_move_iterator(handed.slots.begin()),
                                         std::make_move_iterator(handed.slots.begin() + static_cast<std::ptrdiff_t>(handed.n)));
    KLLM_ASSIGN_OR_RETURN(std::optional<size_t> selected, take_report(round, std::move(report), cands, o, serial, result));
    // The round's candidates in sample order in the result, as they were generated.
    std::vector<size_t> order(cands.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cands[a].sample < cands[b].sample; });
    const size_t offset = result.candidates.size();
    requests.clear();
    for (size_t pos = 0; pos < order.size(); ++pos) {
      OptimizeCandidate& c = cands[order[pos]];
      if (!selected && round < o.rounds) {
        requests.push_back(Request{pipeline::refinement_prompt(prompt, c), {c.sample}, refinement_seed(o.sampling.seed, round + 1, c.sample)});
      }
      if (selected && order[pos] == *selected) result.best = offset + pos;
      result.candidates.push_back(std::move(c));
    }
    if (selected) break;
  }
  if (!result.best) {
    for (const OptimizeCandidate& c : result.candidates) result.failure_reasons.push_back(pipeline::failure_reason(c, o.rounds > 1));
  }
  return result;
}

Json OptimizeResult::to_json() const {
  Json cands = Json::array();
  for (const OptimizeCandidate& c : candidates) {
    cands.push_back({{"round", c.round},
                     {"sample", c.sample},
                     {"file", c.file.string()},
                     {"completion_file", c.completion_file.string()},
                     {"extraction", c.extraction},
                     {"defines_model_new", c.defines_model_new},
                     {"verdict", harness::verdict_name(c.result.verdict)},
                     {"result", c.result.to_json()}});
  }
  const double tokens = static_cast<double>(generation.generated_tokens);
  // The verifier's own serialization of a timing, through a report holding only it.
  harness::VerifyReport timing_only;
  timing_only.reference_timing = reference_timing;
  Json j = {
      {"problem_file", problem_file.string()},
      {"prompt_file", prompt_file.string()},
      {"source", source},
      {"rounds_run", rounds_run},
      {"best", best ? Json(*best) : Json(nullptr)},
      {"best_file", best ? Json(candidates[*best].file.string()) : Json(nullptr)},
      {"best_speedup", best && candidates[*best].result.speedup > 0 ? Json(candidates[*best].result.speedup) : Json(nullptr)},
      {"selection_reason", selection_reason},
      {"generate_ms", generate_ms},
      {"verify_ms", verify_ms},
      {"verify_setup_ms", verify_setup_ms},
      {"verify_setup_overlap_ms", verify_setup_overlap_ms},
      {"verify_while_generating_ms", verify_while_generating_ms},
      {"verify_timelines_ms", verify_timelines_ms},
      {"verify_judges_started", verify_judges_started},
      {"verify_judges_reused", verify_judges_reused},
      {"tokens", generation.generated_tokens},
      {"tokens_per_s", generate_ms > 0 ? tokens * 1000.0 / generate_ms : 0.0},
      {"generation",
       {{"prompt_tokens", generation.prompt_tokens},
        {"generated_tokens", generation.generated_tokens},
        {"prefill_ms", generation.prefill_ms},
        {"decode_ms", generation.decode_ms},
        {"decode_tokens_per_s", generation.decode_ms > 0 ? tokens * 1000.0 / generation.decode_ms : 0.0}}},
      {"sandbox", sandbox},
      {"environment", environment},
      {"reference_timing", timing_only.to_json()["reference_timing"]},
      {"candidates", cands},
      {"failure_reasons", failure_reasons},
  };
  return j;
}

}  // namespace kernelllm
