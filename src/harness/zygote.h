// Internal to the harness: the zygote (python/kernelllm/worker/zygote.py), a trusted process that
// imports torch, Triton and NumPy once, before any CUDA initialisation, and forks every judge and
// candidate worker from that state: a worker starts for a fork instead of a torch import. A
// candidate's process joins the namespaces of a bubblewrap "holder" made for it alone and drops
// to the sandbox's uid with no capabilities, no_new_privs and the affinity filter before any
// candidate code runs; a probe checks all of that from inside before the first candidate
// (docs/trust-boundary.md, "Warm workers"). Where anything fails, workers start as before (exec).
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "workers.h"

namespace kernelllm::harness {

struct ZygoteFork {
  std::string kind;  // "judge", "candidate" or "sandbox_probe"
  std::vector<std::string> env;
  std::string cwd;
  std::optional<pid_t> holder;  // a sandboxed candidate: a process inside its holder's namespaces
  std::vector<std::string> cgroup_procs;
  std::string seccomp;  // raw sock_filter entries; empty: none
  std::optional<uint64_t> rlimit_as, rlimit_nproc;
};

class Zygote {
 public:
  // This process's zygote for the interpreter `python` (as the verifier names it: choose_python;
  // no probe needed), `package_dir` and `interpret` (CPU mode: Triton decorates the
  // kernels of triton.language itself when imported, for the interpreter only with
  // TRITON_INTERPRET=1 set then), started on first use by a thread that lives
  // as long as the process (a child dies with the thread that forked it) and shared by every
  // verifier of the process; a dead one is replaced, at most kMaxStarts times. nullptr when
  // $KERNELLLM_ZYGOTE is 0.
  static std::shared_ptr<Zygote> shared(const std::string& python, const std::filesystem::path& package_dir, bool interpret);
  static constexpr int kMaxStarts = 3;

  // Waits for the greeting (the zygote imports meanwhile); ok when it can fork. Gives up, leaving
  // the zygote to go on starting for later callers, once *cancel is true.
  Status ready(double timeout_s, const std::atomic<bool>* cancel = nullptr);
  // The zygotes of this process that are running: children that outlive every verifier.
  static std::vector<pid_t> pids();
  // One fork; the worker's leader is this process's child when it returns.
  Result<Process> fork(const ZygoteFork& request);
  // Empty when candidates may be forked into sandboxes of `sandbox`'s kind: a probe forked into a
  // fresh holder found the uid, capabilities, no_new_privs, seccomp and namespaces it expects.
  // Else why not. Checked once per sandbox summary.
  std::string candidate_refusal(const Sandbox& sandbox, const std::filesystem::path& package_dir);
  // Why it cannot fork ("" while it can).
  std::string failure() const;
  // Its greeting (null before it greeted): what it imported and warmed (`triton_warm`).
  Json hello() const;

 private:
  Zygote() = default;
  std::string check_sandbox(const Sandbox& sandbox, const std::filesystem::path& package_dir);

  mutable std::mutex mu_;  // one fork round at a time; the members below
  std::unique_ptr<Worker> worker_;
  std::string failed_;
  std::map<std::string, std::string> sandbox_checks_;
};

// A bubblewrap sandbox for one candidate that runs nothing but `sleep`, in the candidate's cgroup:
// its namespaces are what the candidate's forked process joins. Kept by the Worker, killed with it.
struct Holder {
  Process proc;
  pid_t inside = -1;  // a process in all of its namespaces
};
Result<Holder> start_holder(const PreparedSpawn& prepared);

// spawn_worker through the zygote; an error when it cannot (the caller then starts one by exec).
Result<std::unique_ptr<Worker>> fork_worker(Zygote& zygote, const std::string& kind, const std::filesystem::path& package_dir,
                                            const std::filesystem::path& work_dir,
                                            const std::vector<std::filesystem::path>& readable_dirs, const std::string& device,
                                            const Sandbox* sandbox, int threads, const std::vector<std::string>& extra_env = {});

}  // namespace kernelllm::harness
