// The candidate sandbox: bubblewrap namespaces (no network, own pid/ipc namespace, read-only
// view of the system, private writable work dir and caches, non-root uid), a cleared
// environment with an allow-list, and process/memory limits (cgroup when writable, else rlimits).
// `probe` tests at start which of these work here; `summary` says so in one line. A protection
// that does not work is reported as inactive, never silently dropped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/harness/subprocess.h"

namespace kernelllm::harness {

struct SandboxSettings {
  bool enabled = true;                        // false: --no-sandbox (loud warning by the caller)
  bool gpu = false;                           // bind /dev/nvidia* into the sandbox
  uint64_t memory_bytes = uint64_t{8} << 30;  // per candidate
  int max_tasks = 1024;                       // processes + threads (torch starts many threads)
  std::string python;                         // absolute path of the interpreter
  std::string bwrap;                          // empty: $KERNELLLM_BWRAP, else bwrap on PATH
  // Replaced by empty tmpfs inside: under a user namespace the host uid is still 0, so home
  // directories (keys, tokens) would be readable otherwise.
  std::vector<std::string> hidden_dirs = {"/root", "/home"};
  // Bound back read-only where the sandbox mounts an empty tmpfs (/tmp, /dev/shm, hidden_dirs):
  // the interpreter's prefixes, site-packages and sys.path (see keep_paths_to_bind).
  std::vector<std::string> keep_paths;
};

// What the probe found working.
struct SandboxProbe {
  std::string bwrap_path;     // empty when not found
  bool namespaces = false;    // bwrap ran the probe script
  bool net_off = false;       // only loopback inside
  bool fs_read_only = false;  // writing under / failed inside
  bool homes_hidden = false;  // hidden_dirs were replaced (and the probe still ran)
  int uid = -1;               // uid the probe saw inside
  bool cpus_locked = false;   // the probe's sched_setaffinity failed (the seccomp filter holds)
  bool real_uid_root = false; // the host uid behind it is still 0 (user namespace mapping)
  std::string setpriv_path;   // as root: bwrap stays privileged, setpriv drops to 65534 for real
  bool cgroup_memory = false;
  bool cgroup_pids = false;
  std::string cgroup_kind;    // "v1", "v2" or ""
  std::string note;           // why something is inactive
};

// Per-process cgroup directories; removed on destruction (after the process was killed).
class CgroupLease {
 public:
  CgroupLease() = default;
  ~CgroupLease();
  CgroupLease(const CgroupLease&) = delete;
  CgroupLease& operator=(const CgroupLease&) = delete;
  std::vector<std::string> dirs;
  std::string pids_dir;  // the directory with the pids controller; empty without one
  std::vector<std::string> procs_files() const;
};

struct PreparedSpawn {
  SpawnOptions options;
  std::unique_ptr<CgroupLease> cgroup;  // keep alive at least as long as the Process
};

class Sandbox {
 public:
  // Probes once (runs bwrap with a tiny Python script); never fails: missing parts are inactive.
  static Sandbox create(const SandboxSettings& settings);

  const SandboxSettings& settings() const { return settings_; }
  const SandboxProbe& probe() const { return probe_; }
  // "sandbox: net=off fs=read-only uid=65534 (user namespace; host uid 0) tasks=1024 (cgroup) mem=8G (cgroup)"
  std::string summary() const;
  bool active() const { return settings_.enabled && probe_.namespaces; }

  // argv/env for a worker whose private writable directory is `work_dir` and which may read
  // `readable_dirs` (bound read-only; the rest of the system is read-only anyway but /tmp and
  // /dev/shm are private). `env` is the complete allow-listed environment.
  // Sets the memory limit of a running worker's cgroup (no-op without a memory controller).
  Status set_memory_limit(const CgroupLease& lease, uint64_t bytes) const;

  Result<PreparedSpawn> prepare(const std::filesystem::path& work_dir, const std::vector<std::filesystem::path>& readable_dirs,
                                const std::vector<std::string>& argv, std::vector<std::string> env) const;

 private:
  Result<std::unique_ptr<CgroupLease>> make_cgroup() const;
  std::vector<std::string> bwrap_args(const std::filesystem::path& work_dir,
                                      const std::vector<std::filesystem::path>& readable_dirs) const;
  bool drop_uid() const { return !probe_.setpriv_path.empty(); }

  SandboxSettings settings_;
  SandboxProbe probe_;
  bool probing_ = false;  // prepare() wraps in bwrap even before the probe succeeded
};

// Makes one directory of a fresh name under each of `parents` (the same name under all, as the
// v1 hierarchies need), drawing names from `next_name`: a name already taken under any parent (a
// group left by a killed run whose pid this process now has) is given back and the next one tried,
// up to `tries` names. Returns the directories made, in the order of `parents`.
Result<std::vector<std::string>> make_fresh_dirs(const std::vector<std::string>& parents,
                                                 const std::function<std::string()>& next_name, int tries = 32);

// The keep paths to bind back read-only: those that exist and lie strictly under one of
// `tmpfs_roots` (the sandbox mounts an empty tmpfs there), minus any that is, contains or lies
// inside one of `bound_dirs` (the work dir and shared dirs bound explicitly: binding an ancestor
// would expose the run directory and other candidates' dirs). Paths inside another kept path are
// dropped (the outer bind brings them). Sorted, no duplicates.
std::vector<std::string> keep_paths_to_bind(const std::vector<std::string>& keep_paths,
                                            const std::vector<std::string>& tmpfs_roots,
                                            const std::vector<std::string>& bound_dirs);

// The symlinks met while resolving `path` (an interpreter's path, e.g. a venv's bin/python, or a
// venv reached through a link) that lie under one of `tmpfs_roots`: (link, target) in order, so
// that they can be recreated inside the sandbox. Stops after 40 links.
std::vector<std::pair<std::string, std::string>> symlinks_on_path(const std::string& path,
                                                                  const std::vector<std::string>& tmpfs_roots);

// The top-level directories hidden under an empty tmpfs inside the sandbox: `extra` plus every
// directory of / outside the system set (/usr, /bin, /sbin, /lib*, /etc, /opt, /sys, /proc, /dev, /tmp).
std::vector<std::string> hidden_top_dirs(const std::vector<std::string>& extra);

// Finds an executable on PATH (or returns `name` if it contains a '/'); empty when absent.
std::string find_executable(const std::string& name);

}  // namespace kernelllm::harness
