// The eval loop: problems → samples (copied from --candidates or generated once per problem)
// → one verify() per (problem, profile) over the samples that have no verdict yet, each verdict
// committed from on_result → the report from the store. Restarts skip everything committed.
#include "kernelllm/eval/eval.h"

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/eval/report.h"
#include "kernelllm/eval/run_store.h"
#include "kernelllm/harness/cache.h"
#include "kernelllm/pipeline/extract.h"
#include "kernelllm/pipeline/prompt.h"

namespace kernelllm::eval {
namespace fs = std::filesystem;
namespace {

std::string device_kind(const std::vector<std::string>& devices) {
  for (const std::string& d : devices) {
    if (d.rfind("cuda", 0) == 0) return "cuda";
  }
  return "cpu";
}

fs::path absolute_path(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal();
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

// Paths inside the run directory are written relative to it, so that a run's verdicts read the
// same wherever the run directory is (shards merged, a run moved).
std::string relativize(std::string text, const fs::path& run_dir) {
  replace_all(text, run_dir.string() + "/", "");
  return text;
}

class Progress {
 public:
  explicit Progress(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}
  void operator()(const std::string& line) const {
    if (sink_) sink_(line);
  }

 private:
  std::function<void(const std::string&)> sink_;
};

struct Generator {
  const EvalOptions& options;
  const SourceFactory& open_source;
  std::unique_ptr<CompletionSource> source;
  std::optional<PromptTemplate> prompt_template;

  Result<std::vector<NewSample>> samples_for(const Problem& p, const Progress& progress) {
    if (!source) {
      if (!open_source) return error(ErrorCode::invalid_argument, "eval: samples must be generated but no model was given");
      progress("opening the model");
      KLLM_ASSIGN_OR_RETURN(source, open_source());
    }
    if (!prompt_template) {
      KLLM_ASSIGN_OR_RETURN(prompt_template, load_prompt_template(options.model, options.prompt_template_file));
    }
    KLLM_ASSIGN_OR_RETURN(std::string code, read_text_file(p.file));
    KLLM_ASSIGN_OR_RETURN(std::string prompt, format_triton_prompt(prompt_template->text, code));
    GenerateStats stats;
    KLLM_ASSIGN_OR_RETURN(std::vector<std::string> completions,
                          source->complete(prompt, options.k, options.max_new_tokens, options.sampling, {}, &stats));
    double seconds = (stats.prefill_ms + stats.decode_ms) / 1e3;
    progress(fmt::format("{}: generated {} sample(s), {} tokens in {:.1f} s ({:.1f} tok/s)", p.id, completions.size(),
                         stats.generated_tokens, seconds, seconds > 0 ? static_cast<double>(stats.generated_tokens) / seconds : 0.0));
    std::vector<NewSample> out;
    for (const std::string& c : completions) {
      ExtractedCode x = extract_model_new(c);
      out.push_back(NewSample{x.code, c, "generated", x.how});
    }
    return out;
  }
};

Result<std::vector<NewSample>> copied_samples(const EvalOptions& options, const Problem& p) {
  KLLM_ASSIGN_OR_RETURN(std::vector<fs::path> files, candidate_files(options.candidates, p));
  std::vector<NewSample> out;
  for (const fs::path& f : files) {
    KLLM_ASSIGN_OR_RETURN(std::string code, read_text_file(f));
    out.push_back(NewSample{std::move(code), "", f.string(), ""});
  }
  return out;
}

// Verifies the samples of `p` that have no `profile` verdict; commits each as it is reported.
// A sample's timing belongs to the candidate on this GPU, not to a profile: one timed under an
// earlier profile of this run is verified here without timing and shares that measurement, so
// its speedup is the same number in every profile. Returns how many came back not_verified (not
// committed, so a rerun retries them).
Result<int> verify_pending(RunStore& store, const EvalOptions& options, const Problem& p, const std::string& profile,
                           const Progress& progress) {
  KLLM_ASSIGN_OR_RETURN(std::vector<StoredSample> samples, store.samples(p.id));
  KLLM_ASSIGN_OR_RETURN(std::vector<StoredVerdict> verdicts, store.verdicts(p.id));
  std::set<int> done;
  std::map<int, const StoredVerdict*> timed;  // sample -> its verdict of an earlier profile with a timing
  for (const StoredVerdict& v : verdicts) {
    if (v.profile == profile) done.insert(v.sample);
    if (v.profile != profile && v.speedup && v.result.contains("timing") && !timed.count(v.sample)) timed[v.sample] = &v;
  }
  std::vector<const StoredSample*> to_time, to_share;
  for (const StoredSample& s : samples) {
    if (done.count(s.sample)) continue;
    (timed.count(s.sample) && options.verify.timing ? to_share : to_time).push_back(&s);
  }
  if (!done.empty()) progress(fmt::format("{} [{}]: {} verdict(s) from the store", p.id, profile, done.size()));
  if (to_time.empty() && to_share.empty()) return 0;
  progress(fmt::format("{} [{}]: verifying {} sample(s){}", p.id, profile, to_time.size() + to_share.size(),
                       to_share.empty() ? "" : fmt::format(", {} sharing an earlier profile's timing", to_share.size())));
  int not_verified = 0;
  for (const std::vector<const StoredSample*>* group : {&to_time, &to_share}) {
    if (group->empty()) continue;
    const bool share = group == &to_share;
    std::vector<std::string> paths;
    for (const StoredSample* s : *group) paths.push_back((store.dir() / s->candidate_file).string());
    harness::VerifyOptions o = options.verify;
    o.profile = profile;
    o.cache_path = (store.dir() / "verify-cache.sqlite").string();
    o.select = false;
    o.multishape = false;
    if (share) o.timing = false;
    std::mutex mu;
    Status commit_error;
    o.on_result = [&](size_t index, const harness::CandidateResult& r) {
      std::lock_guard<std::mutex> lock(mu);
      const StoredSample& s = *(*group)[index];
      if (r.verdict == harness::Verdict::not_verified) {
        ++not_verified;
        progress(fmt::format("{} sample {} [{}]: not verified ({}); a rerun retries it", p.id, s.sample, profile, r.message));
        return;
      }
      StoredVerdict v;
      v.problem = p.id;
      v.sample = s.sample;
      v.profile = profile;
      v.verdict = std::string(harness::verdict_name(r.verdict));
      v.rule = r.rule;
      v.message = relativize(r.message, store.dir());
      if (r.timing && r.timing->meaningful && r.speedup > 0) v.speedup = r.speedup;
      auto result = parse_json(relativize(r.to_json().dump(), store.dir()), "verifier result");
      v.result = result.ok() ? std::move(*result) : r.to_json();
      if (share && r.verdict == harness::Verdict::correct) {
        const StoredVerdict& earlier = *timed.at(s.sample);
        v.speedup = earlier.speedup;
        v.result["timing"] = earlier.result["timing"];
        v.result["speedup"] = earlier.result.value("speedup", Json(nullptr));
        v.result["timing_shared_from"] = earlier.profile;
      }
      Status s_put = store.put_verdict(v, r.cached);
      if (!s_put.ok() && commit_error.ok()) commit_error = s_put;
      progress(fmt::format("{} sample {} [{}]: {}{}{}", p.id, s.sample, profile, v.verdict, v.rule.empty() ? "" : " (" + v.rule + ")",
                           r.cached ? " (verifier cache)" : ""));
    };
    auto report = harness::verify(p.file.string(), paths, o);
    if (!report.ok()) return report.status().with_context(fmt::format("verifying {} [{}]", p.id, profile));
    if (!commit_error.ok()) return commit_error;
  }
  return not_verified;
}

Json report_run_facts(const Json& config) {
  Json run = config;
  run.erase("shard");  // shards and their merge report the same run
  run["kernelllm_version"] = KERNELLLM_VERSION;
  return run;
}

}  // namespace

Result<Json> run_config(const EvalOptions& options) {
  Json c = Json::object();
  c["problems"] = absolute_path(options.problems).string();
  c["levels"] = options.levels ? Json(*options.levels) : Json(nullptr);
  c["profiles"] = options.profiles;
  c["shard"] = options.shard.to_string();
  const harness::VerifyOptions& v = options.verify;
  c["verifier"] = {{"version", std::string(harness::kVerifierVersion)},
                   {"device_kind", device_kind(v.devices)},
                   {"trials", v.n_trials},
                   {"sandbox", v.sandbox},
                   {"timing", v.timing},
                   {"warmup", v.warmup},
                   {"iters", v.iters},
                   {"kernelbench_tolerance", v.kernelbench_tolerance}};
  if (!options.candidates.empty()) {
    c["candidates"] = absolute_path(options.candidates).string();
    c["model"] = nullptr;
    return c;
  }
  if (options.model.empty()) return error(ErrorCode::invalid_argument, "eval: expected --model or --candidates, found neither");
  if (options.k < 1) return error(ErrorCode::invalid_argument, fmt::format("eval: expected k >= 1, found {}", options.k));
  KLLM_ASSIGN_OR_RETURN(PromptTemplate tmpl, load_prompt_template(options.model, options.prompt_template_file));
  c["candidates"] = nullptr;
  std::error_code ec;
  c["model"] = fs::exists(options.model, ec) ? absolute_path(options.model).string() : options.model;
  c["gen_device"] = options.gen_device;
  c["k"] = options.k;
  c["sampling"] = {{"temperature", options.sampling.temperature},
                   {"top_p", options.sampling.top_p},
                   {"top_k", options.sampling.top_k},
                   {"seed", options.sampling.seed},
                   {"max_new_tokens", options.max_new_tokens}};
  c["prompt_template"] = {{"source", tmpl.source}, {"sha256", harness::sha256_hex(tmpl.text)}};
  return c;
}

Result<Json> run_eval(const EvalOptions& options, const SourceFactory& open_source) {
  Progress progress(options.progress);
  if (options.profiles.empty()) return error(ErrorCode::invalid_argument, "eval: expected at least one verifier profile");
  KLLM_ASSIGN_OR_RETURN(Json config, run_config(options));
  KLLM_ASSIGN_OR_RETURN(std::vector<Problem> all, discover_problems(options.problems, options.levels));
  std::vector<Problem> problems = select_shard(all, options.shard);
  if (problems.empty()) {
    return error(ErrorCode::invalid_argument, fmt::format("eval: shard {} has no problems ({} problem(s) in all); use at most {} shards",
                                                          options.shard.to_string(), all.size(), all.size()));
  }
  if (!options.candidates.empty()) {
    // Every problem needs its candidates: find a missing directory before anything runs.
    for (const Problem& p : problems) KLLM_RETURN_IF_ERROR(candidate_files(options.candidates, p).status());
  }
  KLLM_ASSIGN_OR_RETURN(RunStore store, RunStore::open_or_create(options.out, config));
  KLLM_RETURN_IF_ERROR(store.set_problems(problems));
  progress(fmt::format("run {}: {} problem(s){}", store.dir().string(), problems.size(),
                       options.shard.count > 1 ? fmt::format(" (shard {} of {} in all)", options.shard.to_string(), all.size()) : ""));

  Generator generator{options, open_source, nullptr, std::nullopt};
  int not_verified = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    progress(fmt::format("[{}/{}] {}", i + 1, problems.size(), p.id));
    KLLM_ASSIGN_OR_RETURN(std::vector<StoredSample> existing, store.samples(p.id));
    if (existing.empty()) {
      std::vector<NewSample> samples;
      if (!options.candidates.empty()) {
        KLLM_ASSIGN_OR_RETURN(samples, copied_samples(options, p));
      } else {
        KLLM_ASSIGN_OR_RETURN(samples, generator.samples_for(p, progress));
      }
      KLLM_RETURN_IF_ERROR(store.add_samples(p, samples));
    } else {
      progress(fmt::format("{}: {} sample(s) from the store", p.id, existing.size()));
    }
    for (const std::string& profile : options.profiles) {
      KLLM_ASSIGN_OR_RETURN(int missed, verify_pending(store, options, p, profile, progress));
      not_verified += missed;
    }
  }
  if (not_verified > 0) {
    return error(ErrorCode::resource_exhausted,
                 fmt::format("eval: {} verification(s) came back not_verified (no healthy device or worker); everything "
                             "else is committed in {}: rerun the same command to retry them",
                             not_verified, store.dir().string()));
  }
  return write_run_report(store.dir(), options.metrics);
}

Result<Json> write_run_report(const fs::path& run_dir, const MetricsOptions& metrics) {
  KLLM_ASSIGN_OR_RETURN(RunStore store, RunStore::open_existing(run_dir));
  ReportInput input;
  input.run = report_run_facts(store.config());
  if (store.config().contains("profiles") && store.config()["profiles"].is_array()) {
    input.profiles = store.config()["profiles"].get<std::vector<std::string>>();
  }
  KLLM_ASSIGN_OR_RETURN(input.outcomes, store.outcomes(input.profiles));
  input.metrics = metrics;
  const Json& verifier = store.config().value("verifier", Json::object());
  input.metrics.timing_meaningful = verifier.value("device_kind", "cpu") == "cuda" && verifier.value("timing", true);
  KLLM_ASSIGN_OR_RETURN(Json report, build_report(input));
  KLLM_RETURN_IF_ERROR(write_reports(report, store.dir(), store.dir()));
  return report;
}

Result<Json> merge_runs(const std::vector<fs::path>& inputs, const fs::path& out_dir, const MetricsOptions& metrics) {
  KLLM_RETURN_IF_ERROR(merge_run_stores(inputs, out_dir));
  return write_run_report(out_dir, metrics);
}

namespace {

std::string cell(const std::optional<double>& v) { return v ? fmt::format("{:.3f}", *v) : "-"; }

}  // namespace

Result<std::string> summary_table(const Json& report) {
  const Json* profiles = report.contains("profiles") ? &report["profiles"] : nullptr;
  if (!profiles || !profiles->is_object()) return error(ErrorCode::parse_error, "eval report: expected a \"profiles\" object");
  std::string out;
  bool header = false;
  bool any_timing = false;
  for (auto it = profiles->begin(); it != profiles->end(); ++it) {
    KLLM_ASSIGN_OR_RETURN(ProfileMetrics m, ProfileMetrics::from_json(it.value(), "eval report profile " + it.key()));
    if (!header) {
      out += fmt::format("{:<12} {:>8} {:>8} {:>8}", "profile", "problems", "samples", "correct");
      for (const auto& [k, v] : m.pass_at_k) out += fmt::format(" {:>8}", fmt::format("pass@{}", k));
      for (const auto& [p, v] : m.fast_p) out += fmt::format(" {:>8}", "fast_" + metric_key(p));
      out += fmt::format(" {:>8}\n", "geomean");
      header = true;
    }
    out += fmt::format("{:<12} {:>8} {:>8} {:>8}", m.profile, m.problems, m.samples, m.correct);
    for (const auto& [k, v] : m.pass_at_k) out += fmt::format(" {:>8}", cell(v));
    for (const auto& [p, v] : m.fast_p) {
      out += fmt::format(" {:>8}", cell(v));
      any_timing = any_timing || v.has_value();
    }
    out += fmt::format(" {:>8}\n", m.geomean_speedup ? fmt::format("{:.2f}x", *m.geomean_speedup) : "-");
  }
  const Json& run = report.value("run", Json::object());
  const Json& verifier = run.value("verifier", Json::object());
  if (verifier.value("device_kind", "cpu") != "cuda") {
    out += "timing is not meaningful on CPU (Triton interpreter): fast_p and speedups are not reported\n";
  } else if (!any_timing) {
    out += "no meaningful timing in this run: fast_p and speedups are not reported\n";
  }
  out += "pass@k: '-' where some problem has fewer samples than k\n";
  return out;
}

}  // namespace kernelllm::eval
