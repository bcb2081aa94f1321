// Candidate sandbox: bubblewrap arguments, cgroup limits and the start-up probe of what works.
#include "kernelllm/harness/sandbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/base/file.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/" + name;
      if (::access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return "";
}

CgroupLease::~CgroupLease() {
  // Members killed a moment ago may still be exiting (EBUSY): kill stragglers and retry ~1 s.
  for (const std::string& d : dirs) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      if (::rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      std::ifstream procs(d + "/cgroup.procs");
      for (long pid; procs >> pid;) ::kill(static_cast<pid_t>(pid), SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::vector<std::string> CgroupLease::procs_files() const {
  std::vector<std::string> out;
  for (const std::string& d : dirs) out.push_back(d + "/cgroup.procs");
  return out;
}

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

std::string unique_name() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("kernelllm-{}-{}", ::getpid(), counter++);
}

std::string human_bytes(uint64_t b) {
  if (b % (uint64_t{1} << 30) == 0) return fmt::format("{}G", b >> 30);
  return fmt::format("{}M", b >> 20);
}

// The probe script: which protections hold inside the sandbox. Standard library only.
constexpr const char* kProbeScript = R"(import os, json
ro = False
try:
    open('/kernelllm-probe', 'w')
except OSError:
    ro = True
homes = [d for d in ('/root', '/home') if os.path.isdir(d) and os.listdir(d)]
nets = [n for n in os.listdir('/sys/class/net')] if os.path.isdir('/sys/class/net') else []
try:
    import socket
    ifs = [n for _, n in socket.if_nameindex()]
except OSError:
    ifs = nets
try:
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    cpus_locked = False
except OSError:
    cpus_locked = True
print(json.dumps({'uid': os.getuid(), 'ro': ro, 'ifs': ifs, 'homes': homes, 'cpus_locked': cpus_locked}))
)";

}  // namespace

Result<std::vector<std::string>> make_fresh_dirs(const std::vector<std::string>& parents,
                                                 const std::function<std::string()>& next_name, int tries) {
  std::string last;
  for (int t = 0; t < tries; ++t) {
    last = next_name();
    std::vector<std::string> made;
    bool taken = false;
    for (const std::string& parent : parents) {
      const std::string d = parent + "/" + last;
      if (::mkdir(d.c_str(), 0755) == 0) {
        made.push_back(d);
        continue;
      }
      const int err = errno;
      for (const std::string& m : made) ::rmdir(m.c_str());
      if (err != EEXIST) return error(ErrorCode::io_error, "mkdir " + d + " failed: " + std::strerror(err));
      taken = true;
      break;
    }
    if (!taken) return made;
  }
  return error(ErrorCode::io_error, fmt::format("no free directory name under {} after {} tries (the last: {})",
                                                parents.empty() ? std::string("-") : parents[0], tries, last));
}

Status Sandbox::set_memory_limit(const CgroupLease& lease, uint64_t bytes) const {
  if (!probe_.cgroup_memory || lease.dirs.empty()) return {};
  const bool v2 = probe_.cgroup_kind == "v2";
  const std::string file = lease.dirs.front() + (v2 ? "/memory.max" : "/memory.limit_in_bytes");
  if (!write_file(file, std::to_string(bytes))) return error(ErrorCode::io_error, "cannot write " + file);
  return {};
}

Result<std::unique_ptr<CgroupLease>> Sandbox::make_cgroup() const {
  auto lease = std::make_unique<CgroupLease>();
  if (!probe_.cgroup_memory && !probe_.cgroup_pids) return lease;
  const bool v2 = probe_.cgroup_kind == "v2";
  std::vector<std::string> parents;
  if (v2) parents.push_back("/sys/fs/cgroup");
  if (!v2 && probe_.cgroup_memory) parents.push_back("/sys/fs/cgroup/memory");
  if (!v2 && probe_.cgroup_pids) parents.push_back("/sys/fs/cgroup/pids");
  auto dirs = make_fresh_dirs(parents, unique_name);
  if (!dirs.ok()) return error(ErrorCode::io_error, "cgroup " + probe_.cgroup_kind + ": " + dirs.status().message());
  lease->dirs = std::move(dirs).value();
  if (probe_.cgroup_pids) lease->pids_dir = v2 ? lease->dirs.front() : lease->dirs.back();
  if (v2) {
    const std::string& d = lease->dirs.front();
    if (probe_.cgroup_memory) write_file(d + "/memory.max", std::to_string(settings_.memory_bytes));
    if (probe_.cgroup_memory) write_file(d + "/memory.swap.max", "0");
    if (probe_.cgroup_pids) write_file(d + "/pids.max", std::to_string(settings_.max_tasks));
    return lease;
  }
  // v1: the memory group first, the pids group last (make_fresh_dirs keeps the parents' order).
  if (probe_.cgroup_memory) {
    const std::string& d = lease->dirs.front();
    if (!write_file(d + "/memory.limit_in_bytes", std::to_string(settings_.memory_bytes))) {
      return error(ErrorCode::io_error, "cgroup v1: cannot set " + d + "/memory.limit_in_bytes");
    }
  }
  if (probe_.cgroup_pids) {
    const std::string& d = lease->dirs.back();
    if (!write_file(d + "/pids.max", std::to_string(settings_.max_tasks))) {
      return error(ErrorCode::io_error, "cgroup v1: cannot set " + d + "/pids.max");
    }
  }
  return lease;
}

namespace {

constexpr uid_t kNobody = 65534;

// bwrap creates missing mount points as 0700 root: under our tmpfs mounts, make the
// ancestors of a bind target 0755 first so that an unprivileged uid can walk to it.
void add_parent_dirs(std::vector<std::string>& a, const fs::path& target, const std::vector<std::string>& tmpfs_roots) {
  std::vector<fs::path> chain;
  for (fs::path p = target.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) chain.push_back(p);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::string s = it->string();
    bool under = false;
    for (const std::string& r : tmpfs_roots) under |= s.rfind(r + "/", 0) == 0;
    if (under) {
      for (const std::string& x : {std::string("--perms"), std::string("0755"), std::string("--dir"), s}) a.push_back(x);
    }
  }
}

std::string normal_path(const std::string& p) {
  std::string s = fs::path(p).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// `p` lies strictly inside `dir` (both normal, absolute).
bool strictly_under(const std::string& p, const std::string& dir) {
  if (dir == "/") return p.size() > 1 && p[0] == '/';
  return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && p[dir.size()] == '/';
}

}  // namespace

std::vector<std::string> keep_paths_to_bind(const std::vector<std::string>& keep_paths,
                                            const std::vector<std::string>& tmpfs_roots,
                                            const std::vector<std::string>& bound_dirs) {
  std::vector<std::string> roots, bound, picked;
  for (const std::string& r : tmpfs_roots) roots.push_back(normal_path(r));
  for (const std::string& b : bound_dirs) bound.push_back(normal_path(b));
  std::error_code ec;
  for (const std::string& k : keep_paths) {
    const std::string s = normal_path(k);
    if (s.empty() || s[0] != '/') continue;
    bool in_tmpfs = false;
    for (const std::string& r : roots) in_tmpfs |= strictly_under(s, r);
    if (!in_tmpfs) continue;  // visible anyway through the read-only bind of /
    // Never an ancestor of (or the same as, or inside) a directory bound on purpose: that would
    // expose the run directory, the other candidates' dirs and the judge's files.
    bool clash = false;
    for (const std::string& b : bound) clash |= s == b || strictly_under(b, s) || strictly_under(s, b);
    if (clash || !fs::exists(s, ec)) continue;
    picked.push_back(s);
  }
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  std::vector<std::string> out;
  for (const std::string& p : picked) {
    bool nested = false;
    for (const std::string& q : picked) nested |= strictly_under(p, q);
    if (!nested) out.push_back(p);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> symlinks_on_path(const std::string& path,
                                                                  const std::vector<std::string>& tmpfs_roots) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> roots;
  for (const std::string& r : tmpfs_roots) roots.push_back(normal_path(r));
  fs::path p = fs::path(path).lexically_normal();
  if (!p.is_absolute()) return out;
  for (int hops = 0; hops < 40;) {
    fs::path cur = "/";
    bool restarted = false;
    const fs::path rel = p.relative_path();  // begin() and end() of one object
    std::vector<fs::path> parts(rel.begin(), rel.end());
    for (size_t i = 0; i < parts.size(); ++i) {
      fs::path next = cur / parts[i];
      struct stat st {};
      if (::lstat(next.c_str(), &st) != 0) return out;
      if (S_ISLNK(st.st_mode)) {
        std::error_code ec;
        fs::path target = fs::read_symlink(next, ec);
        if (ec) return out;
        const std::string link = normal_path(next.string());
        bool in_tmpfs = false;
        for (const std::string& r : roots) in_tmpfs |= strictly_under(link, r);
        if (in_tmpfs) out.emplace_back(link, target.string());
        fs::path resolved = target.is_absolute() ? target : cur / target;
        for (size_t j = i + 1; j < parts.size(); ++j) resolved /= parts[j];
        p = resolved.lexically_normal();
        ++hops;
        restarted = true;
        break;
      }
      cur = next;
    }
    if (!restarted) break;
  }
  return out;
}

std::vector<std::string> hidden_top_dirs(const std::vector<std::string>& extra) {
  // What a candidate needs from the host: the system's programs, libraries and configuration.
  // Everything else at the top level (/work, /srv, /mnt, /var, /run, ...: problem files, other
  // candidates' sources, eval stores, sockets) is an empty tmpfs inside; the interpreter's paths
  // and the dirs a worker needs are bound back explicitly.
  static const std::set<std::string> kSystem = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                                                "/opt", "/sys", "/proc", "/dev", "/tmp"};
  std::set<std::string> out(extra.begin(), extra.end());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/", ec)) {
    const std::string p = e.path().string();
    if (!kSystem.count(p) && e.is_directory(ec) && !e.is_symlink(ec)) out.insert(p);
  }
  return {out.begin(), out.end()};
}

std::vector<std::string> Sandbox::bwrap_args(const fs::path& work_dir, const std::vector<fs::path>& readable_dirs) const {
  std::vector<std::string> a = {probe_.bwrap_path, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev",
                                "--proc", "/proc", "--perms", "01777", "--tmpfs", "/tmp", "--perms", "01777", "--tmpfs", "/dev/shm"};
  if (::geteuid() == 0 && !drop_uid()) {
    for (const char* s : {"--unshare-user", "--uid", "65534", "--gid", "65534"}) a.emplace_back(s);
  }
  std::error_code ec;
  if (settings_.gpu) {
    for (const auto& e : fs::directory_iterator("/dev", ec)) {
      std::string n = e.path().filename().string();
      if (n.rfind("nvidia", 0) == 0) {
        for (const std::string& s : {std::string("--dev-bind"), e.path().string(), e.path().string()}) a.push_back(s);
      }
    }
  }
  std::vector<std::string> tmpfs_roots = {"/tmp", "/dev/shm"};
  for (const std::string& h : hidden_top_dirs(settings_.hidden_dirs)) {
    if (fs::is_directory(h, ec)) {
      for (const std::string& x : {std::string("--perms"), std::string("0755"), std::string("--tmpfs"), h}) a.push_back(x);
      tmpfs_roots.push_back(h);
    }
  }
  auto bind = [&](const std::string& how, const std::string& path) {
    add_parent_dirs(a, path, tmpfs_roots);
    for (const std::string& x : {how, path, path}) a.push_back(x);
  };
  // The interpreter's own paths (a venv under /tmp or /dev/shm, pyenv under /root, conda under
  // /home) come back read-only; never one that would expose the run directory: the work dir and
  // the readable dirs beside it (the shared dir). The package dir (site-packages when installed)
  // may lie inside an interpreter path: that is no reason to hide the interpreter.
  std::vector<std::string> bound = {work_dir.string()};
  const fs::path run_dir = work_dir.parent_path();
  for (const fs::path& d : readable_dirs) {
    if (strictly_under(normal_path(d.string()), normal_path(run_dir.string()))) bound.push_back(d.string());
  }
  const std::vector<std::string> kept = keep_paths_to_bind(settings_.keep_paths, tmpfs_roots, bound);
  for (const std::string& k : kept) bind("--ro-bind", k);
  // A venv's bin/python (or the venv itself) reached through symlinks under a tmpfs root: the
  // links are recreated, unless a kept path already brings them.
  for (const auto& [link, target] : symlinks_on_path(settings_.python, tmpfs_roots)) {
    bool present = false;
    for (const std::string& k : kept) present |= link == k || strictly_under(link, k);
    for (const std::string& b : bound) present |= link == normal_path(b) || strictly_under(link, normal_path(b));
    if (present) continue;
    add_parent_dirs(a, link, tmpfs_roots);
    for (const std::string& x : {std::string("--symlink"), target, link}) a.push_back(x);
  }
  for (const fs::path& d : readable_dirs) bind("--ro-bind", d.string());
  bind("--bind", work_dir.string());
  for (const std::string& s : {std::string("--chdir"), work_dir.string()}) a.push_back(s);
  a.emplace_back("--");
  if (drop_uid()) {
    a.push_back(probe_.setpriv_path);
    for (const char* s : {"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"}) {
      a.emplace_back(s);
    }
  }
  return a;
}

Result<PreparedSpawn> Sandbox::prepare(const fs::path& work_dir, const std::vector<fs::path>& readable_dirs,
                                       const std::vector<std::string>& argv, std::vector<std::string> env) const {
  PreparedSpawn out;
  SpawnOptions& o = out.options;
  o.env = std::move(env);
  o.cwd = work_dir.string();
  o.lock_cpu_affinity = true;  // timing pins a candidate to one CPU: it may not move (timed_calls.cpp)
  if (!active() && !probing_) {
    o.argv = argv;
    return out;
  }
  o.argv = bwrap_args(work_dir, readable_dirs);
  if (drop_uid()) {
    // The work dir belongs to the sandbox's uid; everything else stays root's.
    std::error_code ec;
    if (::chown(work_dir.c_str(), kNobody, kNobody) != 0) {
      return error(ErrorCode::io_error, "sandbox: cannot hand " + work_dir.string() + " to uid 65534");
    }
    for (const auto& e : fs::recursive_directory_iterator(work_dir, ec)) {
      if (::lchown(e.path().c_str(), kNobody, kNobody) != 0) {
        return error(ErrorCode::io_error, "sandbox: cannot hand " + e.path().string() + " to uid 65534");
      }
    }
  }
  o.argv.insert(o.argv.end(), argv.begin(), argv.end());
  KLLM_ASSIGN_OR_RETURN(out.cgroup, make_cgroup());
  o.cgroup_procs_files = out.cgroup->procs_files();
  // rlimits where no cgroup does the job. RLIMIT_NPROC counts per real uid, so under uid 0 it
  // would count every root process on the host: only used when we are not root.
  if (!probe_.cgroup_pids && ::geteuid() != 0) o.rlimit_nproc = static_cast<uint64_t>(settings_.max_tasks);
  // RLIMIT_AS breaks CUDA's large virtual reservations: only without a GPU.
  if (!probe_.cgroup_memory && !settings_.gpu) o.rlimit_as_bytes = settings_.memory_bytes;
  return out;
}

Sandbox Sandbox::create(const SandboxSettings& settings) {
  Sandbox s;
  s.settings_ = settings;
  SandboxProbe& p = s.probe_;
  if (!settings.enabled) return s;
  std::string bw = settings.bwrap;
  if (bw.empty()) {
    const char* env = std::getenv("KERNELLLM_BWRAP");
    bw = env && *env ? env : "bwrap";
  }
  p.bwrap_path = find_executable(bw);
  if (p.bwrap_path.empty()) {
    p.note = "bubblewrap (bwrap) not found: no namespaces";
    return s;
  }
  // cgroups: v2 when the root has controllers we may use, else v1 hierarchies.
  if (::access("/sys/fs/cgroup/cgroup.controllers", R_OK) == 0) {
    auto subtree = read_text_file("/sys/fs/cgroup/cgroup.subtree_control", size_t{1} << 16);
    const std::string ctl = subtree.ok() ? *subtree : std::string();
    auto made = make_fresh_dirs({"/sys/fs/cgroup"}, unique_name);
    if (made.ok()) {
      const std::string d = made->front();
      p.cgroup_kind = "v2";
      p.cgroup_memory = ctl.find("memory") != std::string::npos && ::access((d + "/memory.max").c_str(), W_OK) == 0;
      p.cgroup_pids = ctl.find("pids") != std::string::npos && ::access((d + "/pids.max").c_str(), W_OK) == 0;
      ::rmdir(d.c_str());
    }
  } else {
    p.cgroup_kind = "v1";
    for (const char* ctl : {"memory", "pids"}) {
      auto made = make_fresh_dirs({fmt::format("/sys/fs/cgroup/{}", ctl)}, unique_name);
      if (made.ok()) {
        const std::string d = made->front();
        bool ok = ::access((d + (std::string(ctl) == "memory" ? "/memory.limit_in_bytes" : "/pids.max")).c_str(), W_OK) == 0;
        (std::string(ctl) == "memory" ? p.cgroup_memory : p.cgroup_pids) = ok;
        ::rmdir(d.c_str());
      }
    }
  }
  if (!p.cgroup_memory && !p.cgroup_pids) p.cgroup_kind.clear();
  // As root, prefer a real uid drop (bwrap privileged, then setpriv) over a user-namespace
  // mapping, under which the host uid stays 0 and root-owned files (/etc/shadow) stay readable.
  if (::geteuid() == 0) p.setpriv_path = find_executable("setpriv");

  // Run the probe script in the sandbox as a candidate would run.
  char tmpl[] = "/tmp/kernelllm-probe-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    p.note = "cannot make a probe directory";
    return s;
  }
  fs::path dir = tmpl;
  s.probing_ = true;
  auto prepared = s.prepare(dir, {}, {settings.python, "-I", "-c", kProbeScript}, {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"});
  if (prepared.ok()) {
    prepared->options.protocol_fds = false;
    prepared->options.cgroup_procs_files.clear();  // the probe needs no limits
    auto proc = Process::spawn(prepared->options);
    if (proc.ok()) {
      auto exit = proc->wait(deadline_in(30));
      // Its pid namespace's init, orphaned when bwrap exits first, is ours once we are a
      // subreaper (every verify after the first in a process): reaped, not left a zombie.
      (void)reap_exited_children("bwrap", 1.0);
      std::string out = proc->stdout_tail();
      if (exit && exit->exited && exit->code == 0) {
        auto j = parse_json(out, "sandbox probe");
        if (j.ok() && j->is_object()) {
          p.namespaces = true;
          p.uid = j->value("uid", -1);
          p.fs_read_only = j->value("ro", false);
          p.cpus_locked = j->value("cpus_locked", false);
          p.net_off = true;
          for (const auto& n : j->value("ifs", Json::array())) {
            if (n.is_string() && n.get<std::string>() != "lo") p.net_off = false;
          }
          p.real_uid_root = ::geteuid() == 0 && !s.drop_uid();
          // Hidden means: nothing in them but the bound-back interpreter paths.
          p.homes_hidden = true;
          for (const auto& h : j->value("homes", Json::array())) {
            bool kept = false;
            for (const std::string& k : settings.keep_paths) kept |= k.rfind(h.get<std::string>() + "/", 0) == 0;
            if (!kept) p.homes_hidden = false;
          }
        }
      }
      if (!p.namespaces) {
        p.note = fmt::format("bwrap probe failed ({}): {}", exit ? exit->describe() : "timeout", proc->stderr_tail());
      }
    } else {
      p.note = "bwrap probe: " + proc.status().to_string();
    }
  } else {
    p.note = "bwrap probe: " + prepared.status().to_string();
  }
  s.probing_ = false;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return s;
}

std::string Sandbox::summary() const {
  if (!settings_.enabled) return "sandbox: DISABLED (--no-sandbox): candidates run with full access";
  if (!probe_.namespaces) return "sandbox: INACTIVE (" + probe_.note + "): candidates run unconfined";
  std::string uid = probe_.uid == 65534 && probe_.real_uid_root ? "65534 (user namespace; host uid 0 without capabilities)"
                    : probe_.uid == 65534 && drop_uid()        ? "65534 (setpriv, no capabilities)"
                                                                 : std::to_string(probe_.uid);
  std::string tasks = probe_.cgroup_pids ? fmt::format("{} (cgroup {})", settings_.max_tasks, probe_.cgroup_kind)
                      : ::geteuid() != 0 ? fmt::format("{} (rlimit)", settings_.max_tasks)
                                         : std::string("inactive (no pids cgroup; root)");
  std::string mem = probe_.cgroup_memory ? fmt::format("{} (cgroup {})", human_bytes(settings_.memory_bytes), probe_.cgroup_kind)
                    : !settings_.gpu     ? fmt::format("{} (rlimit)", human_bytes(settings_.memory_bytes))
                                         : std::string("inactive (no memory cgroup; RLIMIT_AS breaks CUDA)");
  return fmt::format("sandbox: net={} fs={} homes={} uid={} tasks={} mem={} cpus={} core=off env=allow-list",
                     probe_.net_off ? "off" : "ON", probe_.fs_read_only ? "read-only" : "WRITABLE",
                     probe_.homes_hidden ? "hidden" : "VISIBLE", uid, tasks, mem,
                     probe_.cpus_locked ? "locked" : "MOVABLE (no seccomp filter; checked after each timed round trip)");
}

}  // namespace kernelllm::harness
