// The multi-shape check: after a candidate's `correct` verdict and its timing, its correctness is
// re-run on problem variants whose size globals the judge changed (×0.5, ×0.5 made odd), each
// judged in a slot of one judge process for them all, in the candidate's own process (ModelNew
// constructed again for each variant); the merged result is reported beside the verdict. A
// candidate's check runs on its worker thread, beside the other candidates' main phases.
#include <thread>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

std::vector<ShapeVariant> default_shape_variants() { return {{"half", 0.5, false}, {"half_odd", 0.5, true}}; }

std::string_view shape_verdict_name(ShapeVerdict v) { return v == ShapeVerdict::pass ? "pass" : "fail"; }

std::optional<ShapeVerdict> merge_variant_verdicts(const std::vector<ShapeVariantResult>& variants) {
  bool conclusive = false;
  for (const ShapeVariantResult& v : variants) {
    switch (v.verdict) {
      case Verdict::correct:
      case Verdict::undiscriminating: conclusive = true; break;
      case Verdict::not_verified:
      case Verdict::environment_error:
        if (v.ran) return ShapeVerdict::fail;
        break;
      default: return ShapeVerdict::fail;
    }
  }
  if (!conclusive) return std::nullopt;
  return ShapeVerdict::pass;
}

Json MultishapeResult::to_json() const {
  Json vs = Json::array();
  for (const ShapeVariantResult& v : variants) {
    vs.push_back(Json{{"name", v.name}, {"verdict", verdict_name(v.verdict)}, {"message", v.message}, {"sizes", v.sizes}});
  }
  return Json{{"verdict", shape_verdict_name(verdict)}, {"variants", vs}};
}

std::optional<MultishapeResult> multishape_from_json(const Json& j) {
  if (!j.is_object() || !j.contains("verdict") || !j["verdict"].is_string()) return std::nullopt;
  MultishapeResult m;
  std::string v = j["verdict"].get<std::string>();
  if (v != "pass" && v != "fail") return std::nullopt;
  m.verdict = v == "pass" ? ShapeVerdict::pass : ShapeVerdict::fail;
  for (const Json& e : j.value("variants", Json::array())) {
    if (!e.is_object()) continue;
    ShapeVariantResult r;
    r.name = e.value("name", "");
    r.verdict = verdict_from_name(e.value("verdict", "")).value_or(Verdict::not_verified);
    r.message = e.value("message", "");
    r.sizes = e.value("sizes", Json::object());
    m.variants.push_back(std::move(r));
  }
  return m;
}

// The size variants' states and directories, no judge yet: named at set-up, since the candidate
// workers started from then on bind the directories. Their judges start later (setup_variants),
// once a candidate matched its first trial: 16 more judges making CUDA contexts beside a first wave
// of 8 problems slowed its set-up.
void Verifier::declare_variants(DeviceState& dev) {
  if (!dev.variants.empty()) return;
  for (const ShapeVariant& spec : default_shape_variants()) {
    auto v = std::make_unique<DeviceState>();
    v->index = dev.index;
    v->name = dev.name;
    v->hardware = dev.hardware;
    v->parent = &dev;
    v->variant = spec;
    v->judge_slot = spec.name;
    if (!dev.variants.empty()) v->judge_host = dev.variants.front().get();
    // Named now: candidate processes for the variant may start (binding it) while its judge loads.
    v->shared_dir = run_dir_ / fmt::format("shared-{}", v->tag());
    std::error_code ec;
    fs::create_directories(v->shared_dir, ec);
    dev.variants.push_back(std::move(v));
  }
}

// Starts the variants' judge process and loads the problem in each variant's slot, all at once.
// Runs on variants_thread_, which started it (start_judge: a judge started by exec
// dies with the thread that forked it) and outlives it (release_variants); the loading threads
// start none.
void Verifier::setup_variants(DeviceState& dev) {
  if (dev.variants_ready) return;
  dev.variants_ready = true;
  if (dev.variants.empty()) return;
  // One process for them all (DeviceState::judge_host): the first variant's, started here; every
  // variant's slot in it is loaded below.
  DeviceState& host = *dev.variants.front();
  if (Status s = start_judge(host); !s.ok()) {
    if (host.judge) host.judge->proc.kill_tree();
    for (auto& v : dev.variants) v->unusable = s.message();
  }
  std::vector<std::thread> threads;
  for (auto& v : dev.variants) {
    if (!v->unusable.empty()) continue;
    threads.emplace_back([this, vs = v.get()] {
      log(fmt::format("judge: loading the problem's '{}' size variant on {}", vs->variant.name, vs->name));
      const Status s = setup_device(*vs);  // the GPU's lock held for its GPU work (the parent's)
      if (!s.ok()) {
        // Its slot unusable; the process stays for the other variants' slots (a process that
        // failed was stopped by judge_call_locked) and ends with them (release_variants).
        vs->unusable = s.message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

void Verifier::start_variants() {
  std::call_once(variants_once_, [this] {
    mark("variants_started");
    variants_thread_ = std::thread([this] {
      for (auto& dev : devices_) {
        if (dev->healthy) {
          setup_variants(*dev);
          continue;
        }
        // Never loaded: a candidate checked on this device (found correct before it failed)
        // gets a note, not a judge without a problem.
        for (auto& v : dev->variants) {
          if (v->unusable.empty()) v->unusable = "device " + dev->name + " was taken out of use";
        }
      }
      std::unique_lock lock(variants_mu_);
      variants_loaded_ = true;
      variants_cv_.notify_all();
      // Kept until the call's end (close_feed): a variant judge started by exec dies with this
      // thread, and none is needed after that.
      variants_cv_.wait(lock, [this] { return variants_released_; });
    });
  });
}

void Verifier::release_variants() {
  {
    std::lock_guard lock(variants_mu_);
    variants_released_ = true;
  }
  variants_cv_.notify_all();
  if (variants_thread_.joinable()) variants_thread_.join();
}

void Verifier::wait_variants() {
  start_variants();
  std::unique_lock lock(variants_mu_);
  variants_cv_.wait(lock, [this] { return variants_loaded_; });
}

void Verifier::check_shapes(Worker& w, DeviceState& dev, CandidateResult& r) {
  if (!dev.healthy) {
    r.multishape_note = "not run: device " + r.device + " was taken out of use";
    return;
  }
  std::vector<ShapeVariantResult> results;
  wait_variants();  // their judges have loaded the problem (or are unusable)
  std::string ended;  // the variant in which the candidate's process ended, if one did
  for (auto& v : dev.variants) {
    ShapeVariantResult out;
    out.name = v->variant.name;
    out.sizes = v->size_globals;
    if (!v->unusable.empty()) {
      // Listed as not run, with why, so a result from the other variant does not hide it.
      out.verdict = Verdict::not_verified;
      out.message = "not run: " + v->unusable;
      results.push_back(std::move(out));
      continue;
    }
    if (!ended.empty()) {
      // A crash or a timeout in an earlier variant killed the process: that variant failed, so
      // the merged verdict is fail whatever this one would say.
      out.verdict = Verdict::not_verified;
      out.message = fmt::format("not run: the candidate's process ended in the '{}' variant", ended);
      results.push_back(std::move(out));
      continue;
    }
    if (!w.proc.running()) {
      // Ended after its correct verdict and timing, before any variant: its own doing (a process
      // that exits once timed would otherwise leave the check without evidence; red team).
      out.verdict = Verdict::crash;
      out.message = "the candidate's process ended after its timing, before its size variants ran (" +
                    w.describe_exit() + ")";
      results.push_back(std::move(out));
      continue;
    }
    if (!v->healthy) {
      // Its judge was lost in an earlier candidate's check: not this candidate's doing.
      out.verdict = Verdict::not_verified;
      out.message = "not run: the variant's judge was lost in an earlier check";
      results.push_back(std::move(out));
      continue;
    }
    CandidateResult vr;
    vr.evidence = Json::object();
    out.ran = true;
    if (load_variant(w, *v, vr)) run_trials(w, *v, vr);
    if (vr.verdict == Verdict::environment_error) {
      // Said by the candidate's process after its own code ran (the CUDA context, the one thing
      // outside its reach, was made at its first load): a reply the candidate can choose, so it
      // fails the variant instead of leaving the check without a result (red team: a shape-brittle
      // candidate answering environment_error at other sizes was chosen over an honest one).
      vr.verdict = Verdict::runtime_error;
      vr.message = "the candidate's process reported an environment error after its own code had run: " + vr.message;
    }
    if (!w.proc.running()) ended = v->variant.name;
    // The variant's judge keeps this candidate's outputs for its history rules until told.
    (void)judge_call(*v, Json{{"op", "forget"}, {"candidate", w.id()}}, opts_.load_timeout_s);
    out.verdict = vr.verdict;
    out.message = vr.rule.empty() ? vr.message : vr.rule + ": " + vr.message;
    if (vr.verdict == Verdict::not_verified) {
      out.message = "the check could not finish once the candidate's process took part: " + out.message;
    }
    results.push_back(std::move(out));
  }
  std::optional<ShapeVerdict> merged = merge_variant_verdicts(results);
  if (merged) {
    r.multishape = MultishapeResult{*merged, std::move(results)};
    return;
  }
  std::string why;
  for (const ShapeVariantResult& v : results) why += (why.empty() ? "" : "; ") + v.name + ": " + v.message;
  r.multishape_note = "not run: " + (why.empty() ? std::string("no size variant") : why);
}

// Each correct candidate was checked on its worker thread (check_shapes); what is left
// are the notes of those that were not.
void Verifier::run_multishape() {
  for (CandidateResult& r : report_.candidates) {
    if (r.multishape || !r.multishape_note.empty()) continue;
    if (!opts_.multishape) r.multishape_note = "disabled (--no-multishape)";
    else if (r.verdict != Verdict::correct) r.multishape_note = "not run: the main verdict is not correct";
  }
}

}  // namespace kernelllm::harness
