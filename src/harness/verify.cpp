// The verifier orchestrator: set-up (interpreter probe, sandbox probe, one judge per device,
// trial inputs made once), parallel candidate evaluation on pre-warmed sandboxed workers, and
// the result cache. A judge's start and its set-up of the problem live in judge_setup.cpp,
// per-candidate logic in evaluate.cpp, finalist selection in select.cpp.
#include "verifier.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/cache.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

int remove_stale_run_dirs(const fs::path& base) {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kRunDirPrefix, 0) != 0 || !e.is_directory(ec)) continue;
    // kernelllm-verify-<pid>-XXXXXX; a name without a pid (older runs) is left alone.
    const std::string rest = name.substr(kRunDirPrefix.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    struct stat st {};
    if (pid <= 0 || ::stat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) ++removed;
  }
  return removed;
}

namespace {

std::atomic<bool>& run_dirs_stopped() {
  static std::atomic<bool> stopped{false};
  return stopped;
}

}  // namespace

void stop_making_run_dirs() { run_dirs_stopped().store(true); }
bool making_run_dirs_stopped() { return run_dirs_stopped().load(); }

std::string run_dir_base() {
  const char* shm = "/dev/shm";
  return ::access(shm, W_OK) == 0 ? shm : fs::temp_directory_path().string();
}

Result<std::string> make_run_dir(std::string_view infix) {
  std::string tmpl = fmt::format("{}/{}{}-{}XXXXXX", run_dir_base(), kRunDirPrefix, ::getpid(), infix);
  const auto refused = [] { return error(ErrorCode::resource_exhausted, "stopping (SIGINT/SIGTERM): no new run directory"); };
  if (run_dirs_stopped().load()) return refused();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return error(ErrorCode::io_error, fmt::format("cannot create {}: {}", tmpl, std::strerror(errno)));
  }
  if (run_dirs_stopped().load()) {  // the stop came meanwhile: its clean-up may have listed before this one existed
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    return refused();
  }
  return tmpl;
}

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

void replace_all(Json& j, const std::string& from, const std::string& to) {
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    replace_all(s, from, to);
    j = s;
  } else if (j.is_structured()) {
    for (Json& v : j) replace_all(v, from, to);
  }
}

// Messages and tracebacks name the user's file, not the copy the sandbox ran
// (<run dir>/cand-T-S/candidate.py, removed when the run ends).
void name_user_path(CandidateResult& r, const fs::path& work_dir) {
  const std::string copy = (work_dir / "candidate.py").string();
  for (std::string* s : {&r.message, &r.stderr_tail, &r.multishape_note}) replace_all(*s, copy, r.path);
  replace_all(r.evidence, copy, r.path);
  replace_all(r.stats, copy, r.path);
}

}  // namespace

Verifier::~Verifier() {
  {
    std::lock_guard lock(feed_mu_);  // a feed never closed (its session abandoned): no more come
    if (!closed_) abandoned_ = true;  // and those not yet taken are not verified
    closed_ = true;
  }
  feed_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  stop_reference_timing();
  release_variants();
  // (After close_feed none is left; after a failed set-up, ended here: a judge that may have been
  // kept works in the pool's directory, which goes with it.)
  for (auto& dev : devices_) {
    for (auto& v : dev->variants) JudgePool::shared().end(std::move(v->judge));
    JudgePool::shared().end(std::move(dev->judge));
  }
  devices_.clear();
  if (!run_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(run_dir_, ec);
  }
}

void Verifier::notify(size_t index, const CandidateResult& r) {
  if (!opts_.on_result) return;
  std::lock_guard<std::mutex> lock(notify_mutex_);
  opts_.on_result(index, r);
}

void Verifier::log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

void Verifier::warn(const std::string& line) {
  std::lock_guard<std::mutex> lock(warn_mu_);
  report_.warnings.push_back(line);
}

Reply Verifier::judge_call(DeviceState& dev, const Json& request, double timeout_s, int* fd_out) {
  std::lock_guard<std::mutex> lock(dev.judge_owner().judge_mu);
  return judge_call_locked(dev, request, timeout_s, fd_out);
}

Reply Verifier::judge_call_locked(DeviceState& dev, const Json& request, double timeout_s, int* fd_out) {
  DeviceState& owner = dev.judge_owner();
  if (!owner.judge || !owner.judge->proc.running()) {
    Reply r;
    r.error = "the judge process is gone";
    return r;
  }
  Reply r;
  if (dev.judge_slot.empty()) {
    r = owner.judge->request(request, timeout_s);
  } else {
    Json slotted = request;
    slotted["slot"] = dev.judge_slot;
    r = owner.judge->request(slotted, timeout_s);
  }
  const std::string op = request.value("op", std::string("?"));
  judge_ops_.add(op, r.elapsed_ms);
  // A request's own breakdown (time_prepare: steps_ms), as "<op>.<step>".
  if (r.ok() && r.message.contains("steps_ms") && r.message["steps_ms"].is_object()) {
    for (const auto& [step, ms] : r.message["steps_ms"].items()) {
      if (ms.is_number() && ms.get<double>() >= 0) judge_ops_.add(op + "." + step, ms.get<double>());
    }
  }
  if (r.ok() && fd_out) {
    // The descriptor the judge sent over fd 5 before its reply (under the same lock, so no
    // other request's descriptor can come between).
    Result<int> fd = owner.judge->proc.receive_fd(deadline_in(10));
    if (fd.ok()) {
      *fd_out = *fd;
    } else {
      r.status = ReceiveStatus::protocol_error;
      r.error = fd.status().message();
    }
  }
  if (r.status != ReceiveStatus::ok) {
    owner.judge->proc.kill_tree();
    dev.healthy = false;
    // Every size variant the process served is lost with it (a later candidate's check of them is
    // then not run, not failed).
    if (dev.parent) {
      for (auto& v : dev.parent->variants) {
        if (&v->judge_owner() == &owner) v->healthy = false;
      }
    }
    warn(fmt::format("judge on {} failed ({}): {}; {}", dev.name, r.error_kind(), r.error, owner.judge->proc.stderr_tail()));
  }
  return r;
}

void Verifier::note_exec_start(const std::string& why) {
  if (why.empty()) return;
  std::lock_guard lock(exec_note_mu_);
  if (exec_note_.empty()) exec_note_ = why;
}

double Verifier::ms_from_start() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start_).count();
}

Status Verifier::setup() {
  report_.problem = problem_path_;
  report_.profile = opts_.profile;
  if (opts_.profile != "strict" && opts_.profile != "kernelbench") {
    return error(ErrorCode::invalid_argument, fmt::format("profile: expected strict or kernelbench, found '{}'", opts_.profile));
  }
  KLLM_ASSIGN_OR_RETURN(reference_source_, read_text_file(problem_path_, 16 << 20));
  // Candidates' processes get the problem's text in their load request (its get_inputs makes
  // their inputs): it must fit the protocol's 1 MiB frame as base64.
  if (constexpr size_t kMaxProblemBytes = size_t{512} << 10; reference_source_.size() > kMaxProblemBytes) {
    return error(ErrorCode::invalid_argument, fmt::format("problem {}: {} bytes of source; the verifier takes problems of up to {} "
                                                          "bytes", problem_path_, reference_source_.size(), kMaxProblemBytes));
  }
  reference_b64_ = base64_encode(reference_source_);
  bool cuda = opts_.devices.empty() || opts_.devices.front() != "cpu";
  const std::string python = choose_python(opts_.python);
  KLLM_ASSIGN_OR_RETURN(package_dir_, find_package_dir(opts_.package_dir));
  // Workers are forked by the zygote, which must make them our children: we are their subreaper.
  // It starts importing now, beside the interpreter's probe (each imports torch and Triton: on a
  // host that has not run them yet, 4.5 s and 6.8 s one after the other on an H200's host), when
  // the interpreter is a binary found by path; else (a shim) after the probe, with its answer.
  const bool subreaper = become_subreaper();
  const std::string early = subreaper ? interpreter_path_before_probe(python) : std::string();
  if (!early.empty()) zygote_ = Zygote::shared(early, package_dir_, !cuda);
  KLLM_ASSIGN_OR_RETURN(py_, probe_python(python, cuda));
  report_.timeline_ms["python_probed"] = ms_from_start();
  if (subreaper) zygote_ = Zygote::shared(zygote_interpreter(early, py_.executable), package_dir_, !cuda);
  std::vector<std::string> names = opts_.devices;
  if (cuda && (names.empty() || (names.size() == 1 && names[0] == "cuda"))) {
    names.clear();
    for (size_t i = 0; i < py_.cuda_names.size(); ++i) names.push_back(fmt::format("cuda:{}", i));
  }
  if (names.empty()) return error(ErrorCode::not_found, "device cuda: torch sees no CUDA device");
  report_.environment = Json{{"python", py_.executable}, {"python_version", py_.python_version}, {"torch", py_.torch_version},
                             {"triton", py_.triton_version}, {"numpy", py_.numpy_version}, {"package_dir", package_dir_.string()}};
  Json devs = Json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    auto dev = std::make_unique<DeviceState>();
    dev->index = i;
    dev->name = names[i];
    if (dev->name == "cpu") {
      dev->hardware = "cpu";
    } else {
      size_t ordinal = std::stoul(dev->name.substr(5));
      if (ordinal >= py_.cuda_names.size()) {
        return error(ErrorCode::not_found, fmt::format("device {}: torch sees {} CUDA device(s)", dev->name, py_.cuda_names.size()));
      }
      dev->hardware = py_.cuda_names[ordinal];
      dev->gpu_lock = gpu_lock_file(dev->name);
    }
    devs.push_back(Json{{"name", dev->name}, {"hardware", dev->hardware}});
    devices_.push_back(std::move(dev));
  }
  report_.environment["devices"] = devs;

  SandboxSettings ss;
  ss.enabled = opts_.sandbox;
  ss.gpu = cuda;
  ss.memory_bytes = opts_.memory_bytes;
  ss.max_tasks = opts_.max_tasks;
  ss.python = py_.executable;
  ss.keep_paths = py_.paths;
  sandbox_ = Sandbox::create(ss);
  report_.sandbox = sandbox_.summary();
  // Fail closed: candidates never run unconfined unless the user asked for it (--no-sandbox).
  if (opts_.sandbox && !sandbox_.active()) {
    return error(ErrorCode::unsupported,
                 fmt::format("the candidate sandbox does not work here ({}); refusing to run untrusted candidates unconfined. "
                             "Fix: install bubblewrap (apt-get install bubblewrap, or set KERNELLLM_BWRAP to its path), "
                             "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                             "user.max_user_namespaces > 0) or run as root; or pass --no-sandbox (Python: sandbox=False) "
                             "to run candidates unconfined at your own risk",
                             sandbox_.probe().note.empty() ? std::string("the probe failed") : sandbox_.probe().note));
  }
  if (!sandbox_.active()) report_.warnings.push_back(report_.sandbox);

  const std::string base = run_dir_base();
  // Run directories hold output files in RAM (/dev/shm): those of runs killed before their
  // clean-up (SIGKILL, a lost session) are removed here, named by their dead owner's pid.
  if (int n = remove_stale_run_dirs(base); n > 0) {
    report_.warnings.push_back(fmt::format("removed {} run director{} of verify runs that no longer exist under {}", n,
                                           n == 1 ? "y" : "ies", base));
  }
  KLLM_ASSIGN_OR_RETURN(std::string made, make_run_dir());
  run_dir_ = made;

  std::random_device rd;
  secret_seed_ = ((uint64_t{rd()} << 32) | rd()) & ((uint64_t{1} << 62) - 1);

  if (opts_.use_cache) {
    fs::path path = opts_.cache_path.empty() ? default_cache_path() : fs::path(opts_.cache_path);
    auto c = ResultCache::open(path);
    if (c.ok()) {
      cache_ = std::make_unique<ResultCache>(std::move(*c));
    } else {
      report_.warnings.push_back("result cache disabled: " + c.status().to_string());
    }
  }
  if (!subreaper) {
    note_exec_start("this process may not be its workers' subreaper (PR_SET_CHILD_SUBREAPER refused)");
  } else if (!zygote_) {
    note_exec_start("KERNELLLM_ZYGOTE=0");
  } else {
    if (Status s = zygote_->ready(kZygoteStartS, opts_.cancel); !s.ok()) {
      note_exec_start(s.message());
      zygote_.reset();
    } else if (const Json warm = zygote_->hello().value("triton_warm", Json::object());
               warm.is_object() && warm.contains("error") && warm["error"].is_string()) {
      // Candidates then build Triton's helper module and launchers themselves (~1 s each, as without a zygote).
      report_.warnings.push_back("the zygote could not warm Triton up: " + warm["error"].get<std::string>());
    }
  }
  report_.timeline_ms["zygote_ready"] = ms_from_start();
  // Every judge process is started before any is waited for: their start-up overlaps. The size
  // variants' judges start once a candidate matched its first trial (start_variants); their
  // directories are named now, for the candidate workers that start before.
  for (auto& dev : devices_) {
    (void)spawn_judge(*dev);  // a failure is reported by setup_device, which tries again
    if (opts_.multishape) declare_variants(*dev);
  }
  // One candidate worker per thread starts now too (torch import while the judges load the
  // problem); a thread whose first candidate needs another device starts its own.
  prewarmed_.resize(static_cast<size_t>(jobs_));
  for (size_t t = 0; t < prewarmed_.size(); ++t) {
    DeviceState* dev = pick_device(t);
    if (!dev) break;
    dev->shared_dir = run_dir_ / fmt::format("shared-{}", dev->tag());
    std::error_code ec;
    fs::create_directories(dev->shared_dir, ec);
    auto w = start_candidate_worker(*dev, t);
    if (w.ok()) prewarmed_[t] = std::move(*w);
  }
  for (auto& dev : devices_) {
    log(fmt::format("judge: loading the problem on {}", dev->name));
    KLLM_RETURN_IF_ERROR(setup_device(*dev));
  }
  report_.timeline_ms["setup"] = ms_from_start();
  return {};
}

std::string Verifier::cache_key_for(size_t i, const DeviceState& dev) const {
  CacheKeyParts p;
  p.reference_source = reference_source_;
  p.candidate_source = sources_[i];
  p.profile = opts_.profile;
  p.device_name = dev.hardware;
  p.torch_version = py_.torch_version;
  p.triton_version = py_.triton_version;
  p.verifier_version = std::string(kVerifierVersion);
  p.options = fmt::format("trials={} tol={} timing={} compile={} iters={} sandbox={} multishape={}", opts_.n_trials,
                          opts_.kernelbench_tolerance, opts_.timing, opts_.time_compile, opts_.iters, sandbox_.active(),
                          opts_.multishape ? opts_.multishape_trials : 0);
  return cache_key(p);
}

void Verifier::size_memory_limit(Worker& w, const DeviceState& dev) {
  // Never below what an honest kernel needs: the runtime (torch, Triton, a CUDA context), room for
  // a forward's inputs, outputs and temporaries (4x), the problem's own parameters twice (ModelNew
  // is built on the host like Model, then moved: level3/2_ShallowWideMLP holds 8.6 GB there), and
  // on CPU every timing set held at once.
  const TrialInput& t0 = dev.trials.front();
  const Json mb = dev.problem.value("model_bytes", Json(0));
  const uint64_t model_bytes = mb.is_number_unsigned() ? mb.get<uint64_t>() : 0;
  uint64_t need = (uint64_t{6} << 30) + 4 * (t0.input_bytes + t0.output_bytes) + 2 * model_bytes;
  if (!dev.cuda()) need += dev.timing_inputs.size() * t0.input_bytes;
  w.memory_limit_bytes = std::max(opts_.memory_bytes, need);
  if (w.cgroup) {
    Status s = sandbox_.set_memory_limit(*w.cgroup, w.memory_limit_bytes);
    if (!s.ok()) warn("sandbox memory limit: " + s.to_string());
  }
}

DeviceState* Verifier::pick_device(size_t hint) {
  std::vector<DeviceState*> ok;
  for (auto& d : devices_) {
    if (d->healthy) ok.push_back(d.get());
  }
  return ok.empty() ? nullptr : ok[hint % ok.size()];
}

Result<std::unique_ptr<Worker>> Verifier::start_candidate_worker(DeviceState& dev, size_t thread) {
  uint64_t seq = worker_seq_++;
  fs::path dir = run_dir_ / fmt::format("cand-{}-{}", thread, seq);
  int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, jobs_));
  std::string note;
  // The size variants' directories too (their init inputs): a correct candidate's multi-shape
  // check runs in its own process.
  std::vector<fs::path> readable{dev.shared_dir};
  for (const auto& v : dev.variants) readable.push_back(v->shared_dir);
  // One hardware queue for the candidate's CUDA context (CUDA_DEVICE_MAX_CONNECTIONS=1): the
  // driver makes such a context in about half the time, and a GPU's contexts are made one at a time
  // (its context turn), where its candidates and its timer wait for them. Work on one stream runs
  // as before; streams of the candidate's own share the one queue (less overlap, never more).
  auto w = spawn_worker("candidate", py_, package_dir_, dir, readable, dev.name,
                        sandbox_.active() ? &sandbox_ : nullptr, threads, zygote_.get(), &note,
                        {"CUDA_DEVICE_MAX_CONNECTIONS=1"});
  note_exec_start(note);
  if (w.ok()) (*w)->proc.set_cancel(opts_.cancel);
  return w;
}

void Verifier::worker_thread(size_t thread) {
  // The next worker is spawned while the current candidate runs and imports torch meanwhile.
  std::unique_ptr<Worker> next = thread < prewarmed_.size() ? std::move(prewarmed_[thread]) : nullptr;
  for (;;) {
    const std::optional<size_t> taken = take_candidate();
    if (!taken) break;
    const size_t i = *taken;
    CandidateResult& r = report_.candidates[i];
    r.path = candidate_paths_[i];
    if (opts_.cancel && opts_.cancel->load()) {
      r.verdict = Verdict::not_verified;
      r.message = "verification cancelled";
      continue;  // verify() returns an error: no verdict to announce
    }
    if (!source_errors_[i].empty()) {
      r.verdict = Verdict::compile_error;
      r.message = "cannot read the candidate: " + source_errors_[i];
      notify(i, r);
      continue;
    }
    DeviceState* dev = pick_device(thread);
    if (!dev) {
      r.verdict = Verdict::not_verified;
      r.message = "no healthy device left";
      notify(i, r);
      continue;
    }
    r.device = dev->name;
    std::string key = cache_key_for(i, *dev);
    if (cache_) {
      auto hit = cache_->get(key);
      if (hit.ok() && hit->has_value()) {
        if (std::string stale = cache_entry_error(**hit); !stale.empty()) {
          warn(fmt::format("verify cache entry for {} ignored and rewritten: {}", r.path, stale));
        } else {
          result_from_cache(**hit, r);
          log(fmt::format("[{}] {}: {} (cached)", i, r.path, verdict_name(r.verdict)));
          notify(i, r);
          continue;
        }
      }
    }
    // Not answered from the cache: the reference's probe and timing sets from now on (once per
    // device, on a thread of their own), beside this candidate's start, load and first trials.
    // Begun at a candidate's first matched trial instead, the same H200 throughput run took 86.2 s
    // against 82.6 s; a call answered from the cache makes none.
    start_reference_timing(*dev);
    std::unique_ptr<Worker> w;
    std::string start_error;
    const auto t_wait = std::chrono::steady_clock::now();
    for (int attempt = 0; attempt < 2 && !w; ++attempt) {  // one retry: start-up can fail for unrelated reasons
      if (next && next->device == dev->name) {
        w = std::move(next);
      } else {
        next.reset();
        auto s = start_candidate_worker(*dev, thread);
        if (!s.ok()) {
          start_error = s.status().to_string();
          continue;
        }
        w = std::move(*s);
      }
      Status hello = await_hello(*w, opts_.start_timeout_s);
      if (!hello.ok()) {
        start_error = hello.to_string();
        w.reset();
      }
    }
    if (!w) {
      r.verdict = Verdict::not_verified;
      r.message = "could not start a candidate worker: " + start_error;
      notify(i, r);
      continue;
    }
    if (more_may_come()) {
      auto s = start_candidate_worker(*dev, thread);
      if (s.ok()) next = std::move(*s);
    }
    const double start_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_wait).count();
    size_memory_limit(*w, *dev);
    evaluate(i, *w, *dev, r);
    const bool check_shapes_now = opts_.multishape && r.verdict == Verdict::correct;
    if (check_shapes_now) {
      const auto t_shapes = std::chrono::steady_clock::now();
      check_shapes(*w, *dev, r);
      log(fmt::format("[{}] {}: multishape {}", i, r.path,
                      r.multishape ? std::string(shape_verdict_name(r.multishape->verdict)) : r.multishape_note));
      r.evidence["phases"]["multishape_ms"] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_shapes).count();
    }
    name_user_path(r, w->work_dir);
    r.evidence["phases"]["start_ms"] = start_ms;
    w->proc.kill_tree();
    (void)judge_call(*dev, Json{{"op", "forget"}, {"candidate", w->id()}}, opts_.load_timeout_s);
    log(fmt::format("[{}] {}: {}{}{}", i, r.path, verdict_name(r.verdict), r.rule.empty() ? "" : " (" + r.rule + ")",
                    r.message.empty() ? "" : ": " + r.message.substr(0, 200)));
    notify(i, r);
    // A multi-shape check cut short by the device failing is not kept: a later run checks again.
    if (cache_ && r.verdict != Verdict::not_verified && !(check_shapes_now && !dev->healthy)) {
      Status s = cache_->put(key, r.to_json());
      if (!s.ok()) warn("cache write: " + s.to_string());
    }
  }
}

Result<VerifyReport> Verifier::run() {
  KLLM_RETURN_IF_ERROR(prepare(candidate_paths_.size()));
  return finish();
}

Status Verifier::prepare(size_t expected) {
  t_start_ = std::chrono::steady_clock::now();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n = static_cast<int>(std::max<size_t>(1, expected));
  jobs_ = std::max(1, std::min(opts_.jobs > 0 ? opts_.jobs : hw, n));
  return setup();
}

Result<VerifyReport> Verifier::finish(std::vector<std::string> candidates,
                                      std::function<void(size_t, const CandidateResult&)> on_result) {
  candidate_paths_ = std::move(candidates);
  if (on_result) opts_.on_result = std::move(on_result);
  return finish();
}

Result<VerifyReport> Verifier::finish() {
  if (candidate_paths_.empty()) return error(ErrorCode::invalid_argument, "verify: expected at least one candidate file");
  const std::vector<std::string> all = std::move(candidate_paths_);
  open_feed(all.size());
  for (const std::string& c : all) KLLM_RETURN_IF_ERROR(add(c));
  return close_feed();
}

void Verifier::open_feed(size_t capacity, std::function<void(size_t, const CandidateResult&)> on_result) {
  if (on_result) opts_.on_result = std::move(on_result);
  capacity_ = std::max<size_t>(1, capacity);
  candidate_paths_.assign(capacity_, std::string());
  sources_.assign(capacity_, std::string());
  source_errors_.assign(capacity_, std::string());
  report_.candidates.assign(capacity_, CandidateResult{});
  next_candidate_ = arrived_ = 0;
  closed_ = false;
  // Fewer candidates than the set-up expected: fewer threads (the spare workers started ahead
  // are stopped with the verifier). More: the threads take turns.
  jobs_ = std::max(1, std::min(jobs_, static_cast<int>(capacity_)));
  for (size_t t = static_cast<size_t>(jobs_); t < prewarmed_.size(); ++t) prewarmed_[t].reset();
  log(fmt::format("{}; up to {} candidate(s), {} worker(s)", report_.sandbox, capacity_, jobs_));
  for (int t = 0; t < jobs_; ++t) threads_.emplace_back([this, t] { worker_thread(static_cast<size_t>(t)); });
}

Status Verifier::add(const std::string& candidate_path) {
  // Read before the slot is published: a worker takes the slot as soon as arrived_ counts it.
  auto src = read_text_file(candidate_path, 16 << 20);
  std::lock_guard lock(feed_mu_);
  if (closed_) return error(ErrorCode::invalid_argument, "verify: a candidate added after the last one was announced");
  if (arrived_ >= capacity_) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("verify: expected at most {} candidates, found another ({})", capacity_, candidate_path));
  }
  candidate_paths_[arrived_] = candidate_path;
  sources_[arrived_] = src.ok() ? std::move(*src) : std::string();
  source_errors_[arrived_] = src.ok() ? std::string() : src.status().to_string();
  ++arrived_;
  feed_cv_.notify_all();
  return {};
}

std::optional<size_t> Verifier::take_candidate() {
  std::unique_lock lock(feed_mu_);
  const size_t i = next_candidate_++;
  feed_cv_.wait(lock, [&] { return i < arrived_ || closed_; });
  if (i < arrived_ && !abandoned_) return i;
  return std::nullopt;
}

bool Verifier::more_may_come() {
  std::lock_guard lock(feed_mu_);
  return next_candidate_ < arrived_ || (!closed_ && next_candidate_ < capacity_);
}

Result<VerifyReport> Verifier::close_feed() {
  {
    std::lock_guard lock(feed_mu_);
    closed_ = true;
  }
  feed_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  stop_reference_timing();
  report_.timeline_ms["candidates"] = ms_from_start();
  // Only the slots that were filled.
  candidate_paths_.resize(arrived_);
  sources_.resize(arrived_);
  source_errors_.resize(arrived_);
  report_.candidates.resize(arrived_);
  if (arrived_ == 0) return error(ErrorCode::invalid_argument, "verify: expected at least one candidate file");
  run_multishape();
  for (auto& dev : devices_) {
    if (!dev->healthy && dev->name != "cpu") report_.warnings.push_back(fmt::format("device {} was taken out of use", dev->name));
    // (Only a candidate's paired batch sets it: a problem none of whose candidates got to be timed
    // has none, a probe's few round trips included.)
    if (!report_.reference_timing && dev->ref_timing) {
      report_.reference_timing = dev->ref_timing;
      report_.compile_timing = dev->compile_timing;
    }
  }
  if (opts_.select) {
    select();
    report_.timeline_ms["selection"] = ms_from_start();
  }
  // The variants' judges may still be starting or loading the problem on their own thread (a
  // candidate matched its first trial, then failed): stopped so that the thread ends at its next
  // wait, then that thread joined before any judge is touched here.
  bool variants_loaded = false;
  {
    std::lock_guard lock(variants_mu_);
    variants_loaded = variants_loaded_;
  }
  if (!variants_loaded) {
    for (auto& dev : devices_) {
      for (auto& v : dev->variants) {
        if (v->judge) v->judge->proc.kill_tree();
      }
    }
  }
  release_variants();
  // Each judge ended, or released into the pool for the next call (reuse_judges).
  for (auto& dev : devices_) {
    for (auto& v : dev->variants) end_or_keep_judge(*v);
    end_or_keep_judge(*dev);
  }
  devices_.clear();
  int orphans = reap_orphans();
  if (orphans > 0) report_.warnings.push_back(fmt::format("killed {} orphaned worker process(es)", orphans));
  {
    std::lock_guard lock(exec_note_mu_);
    report_.worker_start = zygote_ && exec_note_.empty() ? "zygote"
                           : zygote_                    ? "zygote, some by exec: " + exec_note_
                                                        : "exec: " + exec_note_;
  }
  report_.timeline_ms["total"] = ms_from_start();
  report_.timeline_ms["gpu_exclusive"] = gpu_use_.exclusive_hold_ms();
  report_.gpu_use = gpu_use_.to_json();
  report_.judge_ms = judge_ops_.to_json();
  report_.judges_started = judges_started_.load();
  report_.judges_reused = judges_reused_.load();
  return std::move(report_);
}

int end_kept_judges() { return static_cast<int>(JudgePool::shared().clear()); }

VerifierPrewarm::VerifierPrewarm(const VerifyOptions& options) {
  const bool cuda = options.devices.empty() || options.devices.front() != "cpu";
  if (const char* z = std::getenv("KERNELLLM_ZYGOTE"); z && std::string(z) == "0") return;
  thread_ = std::thread([python = choose_python(options.python), package = options.package_dir, cuda] {
    // The verifier's own steps (setup()), with its keys: the zygote per interpreter, package and
    // mode, started before the probe when it can be; the probe's answer is cached per interpreter.
    auto dir = find_package_dir(package);
    const bool start = dir.ok() && become_subreaper();
    const std::string early = start ? interpreter_path_before_probe(python) : std::string();
    if (!early.empty()) (void)Zygote::shared(early, *dir, !cuda);
    auto py = probe_python(python, cuda);
    if (start && py.ok()) (void)Zygote::shared(zygote_interpreter(early, py->executable), *dir, !cuda);
  });
}

VerifierPrewarm::~VerifierPrewarm() {
  if (thread_.joinable()) thread_.join();
}

Result<VerifyReport> verify(const std::string& problem_path, const std::vector<std::string>& candidate_paths,
                            const VerifyOptions& options) {
  if (candidate_paths.empty()) return error(ErrorCode::invalid_argument, "verify: expected at least one candidate file");
  Verifier v(problem_path, candidate_paths, options);
  auto report = v.run();
  // Verdicts of workers stopped midway say nothing about their candidates: no report.
  if (options.cancel && options.cancel->load()) return error(ErrorCode::resource_exhausted, "verification cancelled");
  return report;
}

}  // namespace kernelllm::harness
