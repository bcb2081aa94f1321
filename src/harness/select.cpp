// Choosing among correct candidates: on a GPU, the fastest few are re-timed side by side on
// one device (fresh workers, interleaved rounds, so drift hits all alike) and the best median
// wins only beyond noise, else the shortest source; on CPU, timing is not meaningful and the
// shortest correct source is chosen.
#include <algorithm>
#include <fstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "verifier.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

void Verifier::select() {
  std::vector<size_t> correct;
  for (size_t i = 0; i < report_.candidates.size(); ++i) {
    if (report_.candidates[i].verdict == Verdict::correct) correct.push_back(i);
  }
  if (correct.empty()) {
    report_.selection_reason = "no correct candidate";
    return;
  }
  // Candidates whose multi-shape check failed are chosen only when no other is correct.
  std::vector<size_t> generic;
  for (size_t i : correct) {
    const CandidateResult& c = report_.candidates[i];
    if (!c.multishape || c.multishape->verdict != ShapeVerdict::fail) generic.push_back(i);
  }
  struct NoteOnExit {
    std::string& reason;
    std::string note;
    ~NoteOnExit() { reason += note; }
  } brittle{report_.selection_reason, ""};
  if (!generic.empty() && generic.size() < correct.size()) {
    brittle.note = fmt::format("; {} correct candidate(s) failing the multi-shape check left out", correct.size() - generic.size());
    correct = generic;
  }
  // Shorter source first; equal ones by text, then path: the same choice whatever order the
  // candidates came in (optimize hands them over as the engine finishes them).
  auto simpler = [&](size_t a, size_t b) {
    return std::forward_as_tuple(sources_[a].size(), sources_[a], candidate_paths_[a]) <
           std::forward_as_tuple(sources_[b].size(), sources_[b], candidate_paths_[b]);
  };
  auto shortest = [&](const std::vector<size_t>& idx) { return *std::min_element(idx.begin(), idx.end(), simpler); };
  if (correct.size() == 1) {
    report_.selected = correct.front();
    report_.selection_reason = "the only correct candidate";
    return;
  }
  std::vector<size_t> timed;
  for (size_t i : correct) {
    const CandidateResult& c = report_.candidates[i];
    if (c.timing && c.timing->meaningful) timed.push_back(i);
  }
  if (timed.size() < 2) {
    report_.selected = shortest(correct);
    report_.selection_reason = "timing not meaningful here: the shortest correct source";
    return;
  }
  std::sort(timed.begin(), timed.end(), [&](size_t a, size_t b) {
    const double ma = report_.candidates[a].timing->stats.median_ms, mb = report_.candidates[b].timing->stats.median_ms;
    return ma != mb ? ma < mb : simpler(a, b);
  });
  if (timed.size() > static_cast<size_t>(std::max(2, opts_.finalists))) timed.resize(static_cast<size_t>(std::max(2, opts_.finalists)));
  DeviceState* dev = pick_device(0);
  if (!dev || !dev->cuda()) {
    report_.selected = timed.front();
    report_.selection_reason = "no healthy GPU for re-timing: the best first-pass median";
    return;
  }
  constexpr int kRounds = 5;
  const int per_round = std::max(3, opts_.iters / kRounds);
  // The reference's batches first, while no candidate process of the call is alive: a finalist's
  // background work during them would raise the load baselines its own loads are clocked against.
  ensure_reference_timing(*dev);  // (its own takings of the GPU; nothing once it is done)
  ensure_load_baselines(*dev, per_round);
  // Fresh workers for the finalists, all started and loaded at once, then interleaved rounds of
  // short timings.
  std::vector<Result<std::unique_ptr<Worker>>> started;
  for (size_t i : timed) started.push_back(start_candidate_worker(*dev, 1000 + i));
  std::vector<std::string> failed(timed.size());
  {
    std::vector<std::thread> loaders;
    for (size_t k = 0; k < timed.size(); ++k) {
      loaders.emplace_back([&, k] {
        auto& w = started[k];
        if (w.ok()) {
          if (Status hello = await_hello(**w, opts_.start_timeout_s); !hello.ok()) w = hello;
        }
        if (!w.ok()) {
          failed[k] = fmt::format("re-timing: cannot start a worker for {}: {}", candidate_paths_[timed[k]], w.status().message());
          return;
        }
        CandidateResult scratch;
        if (!load_candidate(timed[k], **w, *dev, scratch)) {
          failed[k] = fmt::format("re-timing: {} failed to load again: {}", candidate_paths_[timed[k]], scratch.message);
        }
      });
    }
    for (std::thread& t : loaders) t.join();
  }
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<size_t> alive;
  for (size_t k = 0; k < timed.size(); ++k) {
    if (!failed[k].empty()) {
      warn(failed[k]);
      if (started[k].ok()) (*started[k])->proc.kill_tree();
      continue;
    }
    workers.push_back(std::move(*started[k]));
    alive.push_back(timed[k]);
  }
  std::vector<Finalist> finalists(alive.size());
  std::vector<bool> ok(alive.size(), true);
  // Each finalist's times per round; only rounds that timed every finalist still in count, so a
  // finalist whose batches could not be taken is compared on the same rounds as the others, never
  // left out (red team: GPU work one finalist keeps queued would otherwise remove its rivals).
  std::vector<std::vector<std::optional<std::vector<double>>>> round_times(kRounds,
                                                                           std::vector<std::optional<std::vector<double>>>(alive.size()));
  {
    for (int round = 0; round < kRounds; ++round) {
      for (size_t k = 0; k < alive.size(); ++k) {
        if (!ok[k]) continue;
        // The GPU taken for one finalist's batch at a time: a whole selection held it for up to
        // 15 s on an H200 while every other call on the GPU waited (the finalists between their
        // batches run nothing, and the rounds alternate them).
        const auto lock = use_gpu(*dev, GpuGuard::Mode::exclusive, "re-timing");
        // The other finalists stopped meanwhile (their whole process trees): none of them can
        // slow this one down to be chosen over it, from a thread launching GPU work or spinning on
        // its CPU. One still running after the wait is dropped.
        for (size_t o = 0; o < alive.size(); ++o) {
          if (o == k || !ok[o]) continue;
          const bool held = workers[o]->proc.pause();
          if (!held || !workers[o]->proc.wait_stopped(deadline_in(2))) {
            ok[o] = false;
            workers[o]->proc.kill_tree();
            warn(fmt::format("re-timing: {} did not stop while another finalist was timed: dropped", candidate_paths_[alive[o]]));
          }
        }
        CandidateResult scratch;
        std::optional<TimingResult> t = timed_batch(*dev, workers[k].get(), per_round, false, &scratch);
        for (size_t o = 0; o < alive.size(); ++o) {
          if (o != k && ok[o]) workers[o]->proc.resume();
        }
        if (!t && scratch.evidence.contains("timing_not_taken")) {
          // The GPU stayed busy before this batch (work someone left queued): this round counts
          // for no finalist; the finalist stays (dropping it would let that work choose the winner).
          warn(fmt::format("re-timing {}: round {} not taken: {}", candidate_paths_[alive[k]], round + 1,
                           scratch.evidence["timing_not_taken"].get<std::string>()));
          continue;
        }
        if (!t) {
          ok[k] = false;
          workers[k]->proc.kill_tree();
          warn(fmt::format("re-timing {} failed: {}: {}", candidate_paths_[alive[k]], verdict_name(scratch.verdict),
                           scratch.message));
          continue;
        }
        round_times[static_cast<size_t>(round)][k] = t->times_ms;
      }
    }
  }
  int complete_rounds = 0;
  for (const auto& times : round_times) {
    bool complete = true;
    for (size_t k = 0; k < alive.size(); ++k) complete = complete && (!ok[k] || times[k].has_value());
    if (!complete) continue;
    ++complete_rounds;
    for (size_t k = 0; k < alive.size(); ++k) {
      if (ok[k]) finalists[k].times_ms.insert(finalists[k].times_ms.end(), times[k]->begin(), times[k]->end());
    }
  }
  std::vector<Finalist> usable;
  std::vector<size_t> usable_idx;
  for (size_t k = 0; k < alive.size(); ++k) {
    if (!ok[k] || finalists[k].times_ms.empty()) continue;
    finalists[k].source_bytes = sources_[alive[k]].size();
    usable.push_back(finalists[k]);
    usable_idx.push_back(alive[k]);
    report_.candidates[alive[k]].evidence["retimed_ms"] = finalists[k].times_ms;
  }
  for (auto& w : workers) w->proc.kill_tree();
  if (usable.empty()) {
    report_.selected = timed.front();
    report_.selection_reason = complete_rounds == 0 && std::count(ok.begin(), ok.end(), true) > 0
                                   ? "no round re-timed every finalist (the GPU stayed busy before a batch): the best first-pass median"
                                   : "re-timing failed for every finalist: the best first-pass median";
    return;
  }
  Selection s = select_finalist(usable);
  report_.selected = usable_idx[s.index];
  report_.selection_reason = fmt::format("{} finalist(s) re-timed side by side on {}: {}", usable.size(), dev->name, s.reason);
}

}  // namespace kernelllm::harness
