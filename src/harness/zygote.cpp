// The zygote: one per interpreter and package per process, forking every worker (zygote.h).
#include "zygote.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

namespace {

// What a holder runs: says it is up (bwrap has made every namespace and mount by then), then sleeps.
const std::vector<std::string> kHolderCommand = {"/bin/sh", "-c", "echo ready; exec sleep 2147483647"};
const std::vector<std::string> kHolderEnv = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
constexpr double kForkTimeoutS = 10;

// "mnt:[4026531841]" for `who` = a pid or "self"; "" when it cannot be read.
std::string ns_id(const std::string& who, const char* name) {
  std::error_code ec;
  fs::path p = fs::read_symlink(fmt::format("/proc/{}/ns/{}", who, name), ec);
  return ec ? std::string() : p.string();
}

// The request part every sandboxed fork shares: the holder, the cgroups, filter and limits of
// the spawn the sandbox prepared.
void add_sandbox(ZygoteFork& f, const PreparedSpawn& prepared, const Holder& holder) {
  f.holder = holder.inside;
  f.cgroup_procs = prepared.options.cgroup_procs_files;
  f.seccomp = prepared.options.lock_cpu_affinity ? affinity_lock_filter() : "";
  f.rlimit_as = prepared.options.rlimit_as_bytes;
  f.rlimit_nproc = prepared.options.rlimit_nproc;
}

// A directory of its own for the zygote (HOME, TMPDIR and caches it never writes), named like a
// run directory so that a later run removes it once this process is gone.
Result<fs::path> zygote_dir() {
  KLLM_ASSIGN_OR_RETURN(std::string made, make_run_dir("zygote-"));
  return fs::path(made);
}

// Every zygote of this process, by interpreter, package and mode; never destroyed: a zygote lives as
// long as the process (it dies with its keeper thread).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::pair<int, std::shared_ptr<Zygote>>> zygotes;  // starts so far, the current one
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

}  // namespace

std::vector<pid_t> Zygote::pids() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<pid_t> out;
  for (const auto& [key, entry] : r.zygotes) {
    if (!entry.second) continue;
    std::lock_guard z(entry.second->mu_);
    if (entry.second->worker_ && entry.second->worker_->proc.running()) out.push_back(entry.second->worker_->proc.pid());
  }
  return out;
}

std::shared_ptr<Zygote> Zygote::shared(const std::string& python, const fs::path& package_dir, bool interpret) {
  if (const char* z = std::getenv("KERNELLLM_ZYGOTE"); z && std::string(z) == "0") return nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto* zygotes = &r.zygotes;
  auto& [starts, current] = (*zygotes)[fmt::format("{}\n{}\n{}", python, package_dir.string(), interpret)];
  if (current && current->failure().empty()) return current;
  if (starts >= kMaxStarts) return current;
  ++starts;
  std::shared_ptr<Zygote> z(new Zygote());
  z->worker_ = std::make_unique<Worker>();
  z->worker_->kind = "zygote";
  auto dir = zygote_dir();
  if (!dir.ok()) {
    z->failed_ = dir.status().message();
    return current = z;
  }
  z->worker_->work_dir = *dir;
  SpawnOptions o;
  o.argv = {python, "-I", "-B", (package_dir / "kernelllm" / "worker" / "launch.py").string(), "zygote"};
  o.env = worker_env(*dir, interpret ? "cpu" : "", 1);  // "cpu": TRITON_INTERPRET=1
  o.cwd = dir->string();
  o.fd_channel = true;
  // Spawned by a thread of its own that never ends: the zygote dies with the thread that forked
  // it (PR_SET_PDEATHSIG), and the verifier's threads come and go.
  std::promise<Result<Process>> started;
  std::future<Result<Process>> got = started.get_future();
  std::thread([o, started = std::move(started)]() mutable {
    started.set_value(Process::spawn(o));
    for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
  }).detach();
  Result<Process> proc = got.get();
  if (proc.ok()) {
    z->worker_->proc = std::move(*proc);
  } else {
    z->failed_ = proc.status().message();
  }
  return current = z;
}

std::string Zygote::failure() const {
  std::lock_guard lock(mu_);
  return failed_;
}

Json Zygote::hello() const {
  std::lock_guard lock(mu_);
  return worker_ ? worker_->hello : Json();
}

Status Zygote::ready(double timeout_s, const std::atomic<bool>* cancel) {
  std::lock_guard lock(mu_);
  if (!failed_.empty()) return error(ErrorCode::io_error, "zygote: " + failed_);
  // In slices, looking at `cancel` between them; the last slice is await_hello's own.
  const Deadline end = deadline_in(timeout_s);
  while (worker_->hello.is_null() && Clock::now() + std::chrono::milliseconds(250) < end) {
    if (cancel && cancel->load()) return error(ErrorCode::io_error, "zygote: cancelled while it was starting");
    if (Status s = await_hello_slice(*worker_, 0.2); !s.ok()) {
      failed_ = s.message();
      return s;
    }
  }
  if (Status s = await_hello(*worker_, std::chrono::duration<double>(end - Clock::now()).count()); !s.ok()) {
    failed_ = s.message();
    return s;
  }
  return {};
}

Result<Process> Zygote::fork(const ZygoteFork& f) {
  SpawnOptions o;
  o.argv = {"zygote-forked " + f.kind};
  o.fd_channel = true;
  // The cgroups it joins: its members are the process's tree (stopped between timed round trips,
  // pinned, killed), as for a worker started by exec. Without them the tree was its /proc
  // descendants: a process it double-forked (re-parented to the holder's init) was not stopped,
  // and every stop read every process of the machine (3.6 ms a paired round trip on an H200).
  o.cgroup_procs_files = f.cgroup_procs;
  return Process::adopt(o, [&](const ChildEnds& e) -> Result<pid_t> {
    std::lock_guard lock(mu_);
    auto fail = [&](const std::string& why) {
      failed_ = why;  // its stream of descriptors and frames may be out of step: never asked again
      worker_->proc.kill_tree();
      return error(ErrorCode::io_error, "zygote: " + why);
    };
    if (!failed_.empty()) return error(ErrorCode::io_error, "zygote: " + failed_);
    if (worker_->hello.is_null()) return error(ErrorCode::io_error, "zygote: not ready");
    const Deadline d = deadline_in(kForkTimeoutS);
    for (int fd : {e.request_read, e.reply_write, e.channel, e.out_write, e.err_write}) {
      if (Status s = worker_->proc.send_fd(fd, d); !s.ok()) return fail("passing descriptors: " + s.message());
    }
    Json req{{"op", "fork"}, {"kind", f.kind}, {"env", f.env}, {"cwd", f.cwd}, {"cgroup_procs", f.cgroup_procs},
             {"holder_pid", f.holder ? Json(*f.holder) : Json(nullptr)}};
    if (!f.seccomp.empty()) req["seccomp_b64"] = base64_encode(f.seccomp);
    if (f.rlimit_as) req["rlimit_as"] = *f.rlimit_as;
    if (f.rlimit_nproc) req["rlimit_nproc"] = *f.rlimit_nproc;
    Reply r = worker_->request(req, kForkTimeoutS);
    if (!r.ok()) {
      return fail(fmt::format("fork ({}): {}; {}", r.error_kind(), r.error_message(), worker_->proc.stderr_tail()));
    }
    return static_cast<pid_t>(r.message.value("pid", 0));
  });
}

Result<Holder> start_holder(const PreparedSpawn& prepared) {
  SpawnOptions o = prepared.options;
  // In the worker's cgroup, as bwrap and its init are for a worker started by exec: the holder's
  // sleep runs as the sandbox's uid in the candidate's pid namespace, so the candidate could
  // ptrace it; what it made that process do is counted, limited and killed with the candidate.
  o.protocol_fds = false;
  o.fd_channel = false;
  Holder h;
  KLLM_ASSIGN_OR_RETURN(h.proc, Process::spawn(o));
  if (!h.proc.await_stdout("ready\n", deadline_in(20))) {
    std::string why = h.proc.exit_info() ? h.proc.exit_info()->describe() : std::string("no word in 20 s");
    return error(ErrorCode::io_error, fmt::format("sandbox holder did not start ({}): {}", why, h.proc.stderr_tail()));
  }
  const std::vector<pid_t> inside = list_descendants(h.proc.pid());
  if (inside.empty()) return error(ErrorCode::io_error, "sandbox holder: no process inside its namespaces");
  h.inside = inside.back();
  return h;
}

namespace {

bool all_equal(const Json& values, const std::string& want) {
  if (!values.is_array() || values.empty()) return false;
  for (const Json& v : values) {
    if (!v.is_string() || v.get<std::string>() != want) return false;
  }
  return true;
}

}  // namespace

std::string Zygote::check_sandbox(const Sandbox& sandbox, const fs::path& package_dir) {
  char tmpl[] = "/tmp/kernelllm-zygote-probe-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return "cannot make a probe directory";
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  auto prep = sandbox.prepare(dir, {package_dir}, kHolderCommand, kHolderEnv);
  if (!prep.ok()) return prep.status().message();
  auto holder = start_holder(*prep);
  if (!holder.ok()) return holder.status().message();
  ZygoteFork f;
  f.kind = "sandbox_probe";
  f.env = kHolderEnv;
  f.cwd = dir.string();
  add_sandbox(f, *prep, *holder);
  // fork() takes mu_ itself: the caller (candidate_refusal) does not hold it here.
  auto p = fork(f);
  if (!p.ok()) return p.status().message();
  auto exit = p->wait(deadline_in(30));
  if (!exit || !exit->exited || exit->code != 0) {
    p->kill_tree();
    return fmt::format("the probe forked into a sandbox failed ({}): {}", exit ? exit->describe() : "timeout", p->stderr_tail());
  }
  const std::string out = p->stdout_tail();
  Json j = Json::parse(out.substr(0, out.find('\n')), nullptr, false);
  if (!j.is_object() || !j.contains("status") || !j.contains("ns")) return "the probe's answer is not JSON: " + out;
  const Json& st = j["status"];
  const Json& ns = j["ns"];
  const SandboxProbe& sp = sandbox.probe();
  std::vector<std::string> wrong;
  const std::string uid = std::to_string(sp.uid);
  if (!st.contains("Uid") || !all_equal(st["Uid"], uid)) wrong.push_back("uid " + (st.contains("Uid") ? st["Uid"].dump() : "?") + ", not " + uid);
  if (sp.uid == 65534 && (!st.contains("Gid") || !all_equal(st["Gid"], "65534"))) wrong.push_back("gid " + st.value("Gid", Json()).dump());
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    if (!st.contains(cap) || !all_equal(st[cap], "0000000000000000")) wrong.push_back(fmt::format("{} {}", cap, st.value(cap, Json()).dump()));
  }
  if (!st.contains("NoNewPrivs") || !all_equal(st["NoNewPrivs"], "1")) wrong.push_back("no_new_privs not set");
  if (!f.seccomp.empty()) {
    if (!st.contains("Seccomp") || !all_equal(st["Seccomp"], "2")) wrong.push_back("no seccomp filter");
    if (!j.value("cpus_locked", false)) wrong.push_back("sched_setaffinity still works");
  }
  if (!j.value("ro", false)) wrong.push_back("the file system is writable");
  if (j.value("cwd", "") != dir.string()) wrong.push_back("cwd " + j.value("cwd", std::string("?")));
  for (const char* n : {"ipc", "uts", "net", "pid", "mnt", "user"}) {
    const std::string want = ns_id(std::to_string(holder->inside), n);
    if (std::string(n) == "user" && want == ns_id("self", "user")) continue;  // no user namespace (root, setpriv)
    if (want.empty() || !ns.contains(n) || ns[n] != want) {
      wrong.push_back(fmt::format("{} namespace {} is not the holder's {}", n, ns.value(n, Json()).dump(), want));
    }
    if (std::string(n) != "user" && want == ns_id("self", n)) wrong.push_back(fmt::format("the holder shares our {} namespace", n));
  }
  if (wrong.empty()) return "";
  std::string s = "a candidate forked by the zygote would not be confined as one started by exec: ";
  for (size_t i = 0; i < wrong.size(); ++i) s += (i ? "; " : "") + wrong[i];
  return s;
}

std::string Zygote::candidate_refusal(const Sandbox& sandbox, const fs::path& package_dir) {
  const std::string key = sandbox.summary();
  {
    std::lock_guard lock(mu_);
    if (!failed_.empty()) return "zygote: " + failed_;
    if (auto it = sandbox_checks_.find(key); it != sandbox_checks_.end()) return it->second;
  }
  // Concurrent first calls may both probe; the answers agree.
  std::string why = check_sandbox(sandbox, package_dir);
  std::lock_guard lock(mu_);
  sandbox_checks_[key] = why;
  return why;
}

Result<std::unique_ptr<Worker>> fork_worker(Zygote& zygote, const std::string& kind, const fs::path& package_dir,
                                            const fs::path& work_dir, const std::vector<fs::path>& readable_dirs,
                                            const std::string& device, const Sandbox* sandbox, int threads,
                                            const std::vector<std::string>& extra_env) {
  auto w = std::make_unique<Worker>();
  w->work_dir = work_dir;
  w->device = device;
  w->kind = kind;
  ZygoteFork f;
  f.kind = kind;
  f.env = worker_launch_env(kind, work_dir, device, threads, extra_env);
  f.cwd = work_dir.string();
  if (kind == "candidate" && sandbox) {
    if (std::string why = zygote.candidate_refusal(*sandbox, package_dir); !why.empty()) {
      return error(ErrorCode::unsupported, why);
    }
    std::vector<fs::path> readable = readable_dirs;
    readable.push_back(package_dir);
    KLLM_ASSIGN_OR_RETURN(PreparedSpawn prep, sandbox->prepare(work_dir, readable, kHolderCommand, kHolderEnv));
    KLLM_ASSIGN_OR_RETURN(Holder h, start_holder(prep));
    add_sandbox(f, prep, h);
    w->cgroup = std::move(prep.cgroup);
    w->holder = std::move(h.proc);
    w->base_processes = 5;  // the holder's bwrap, its init and sleep; the leader; the interpreter
  }
  KLLM_ASSIGN_OR_RETURN(w->proc, zygote.fork(f));
  w->started_by = "zygote";
  return w;
}

}  // namespace kernelllm::harness
