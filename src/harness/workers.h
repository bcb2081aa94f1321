// Internal to the harness: the Python interpreter probe, worker start-up (judge: trusted,
// env-cleaned; candidate: sandboxed) and one request/reply round with a deadline.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/harness/sandbox.h"
#include "kernelllm/harness/subprocess.h"

namespace kernelllm::harness {

struct PythonEnv {
  std::string executable;  // absolute, resolved by the interpreter itself (no shims)
  std::string python_version, torch_version, triton_version, numpy_version;
  std::vector<std::string> cuda_names;  // index = CUDA ordinal (only when asked)
  std::vector<std::string> paths;       // prefixes and site-packages the interpreter needs
  std::vector<std::string> files;       // the interpreter and the torch/NumPy/Triton files imported
};
// Runs `python` (trusted, our environment) to learn the above; `cuda` also lists GPUs. Once per
// process, and across processes through a file next to the verify cache (workers.cpp),
// valid while every file it rests on keeps its mtime and size.
Result<PythonEnv> probe_python(const std::string& python, bool cuda);

// The interpreter to use: option, else $KERNELLLM_PYTHON, else python3.
std::string choose_python(const std::string& option);
// `python` (choose_python's answer) as an absolute path when it is a binary, as found through
// this process's PATH and working directory: what a zygote can be started with before the probe
// has run. "" when not found or not a binary (a script or a shim such as pyenv's, whose choice
// rests on an environment the zygote does not get): the probe's `executable` is used then.
std::string interpreter_path_before_probe(const std::string& python);
// The interpreter the zygote runs: `early` (interpreter_path_before_probe's answer) when the probe
// reports that very path as its executable, else the probe's `executable` (a shim, or a binary
// that runs another). By the path, not the file: a venv's bin/python links to the base interpreter.
std::string zygote_interpreter(const std::string& early, const std::string& probed);
// The directory that holds kernelllm/worker/launch.py: option, $KERNELLLM_PACKAGE_DIR, the
// installed layout next to the running binary (kernelllm/bin/../..), else the source tree.
Result<std::filesystem::path> find_package_dir(const std::string& option);

// The allow-listed environment of a worker whose private dir is `work_dir`.
std::vector<std::string> worker_env(const std::filesystem::path& work_dir, const std::string& device, int threads);
// worker_env for a `kind` worker ("judge" or "candidate"; the judge's device added), its work dir made.
// `extra`: more NAME=value entries (candidates and size variants' judges: CUDA_DEVICE_MAX_CONNECTIONS=1).
std::vector<std::string> worker_launch_env(const std::string& kind, const std::filesystem::path& work_dir,
                                           const std::string& device, int threads,
                                           const std::vector<std::string>& extra = {});

// Replies are read from processes that run code we do not trust (a candidate can write frames
// of its own to the reply pipe; a problem module runs in the judge): every member the
// orchestrator reads is type-checked here, once per frame. Empty when `m` is well formed, else
// what is wrong ("member 'run_ms': expected a number, found string").
std::string reply_shape_error(const Json& m);

struct Reply {
  ReceiveStatus status = ReceiveStatus::closed;
  Json message;        // when ok (may have ok:false)
  std::string error;   // otherwise
  double elapsed_ms = 0;
  bool ok() const { return status == ReceiveStatus::ok && message.value("ok", false); }
  std::string error_kind() const;     // reply error kind, or "timeout"/"closed"/"protocol"
  std::string error_message() const;
};

class Zygote;  // zygote.h

class Worker {
 public:
  std::unique_ptr<CgroupLease> cgroup;  // destroyed after `proc` (declared first)
  Process holder;  // a candidate forked by the zygote: the sandbox whose namespaces it joined
  Process proc;
  Json hello;
  std::filesystem::path work_dir;
  uint64_t memory_limit_bytes = 0;  // of its cgroup, when sized (Verifier::size_memory_limit)
  std::string device;
  std::string kind;  // "judge" or "candidate"
  std::string started_by = "exec";  // or "zygote"
  long base_processes = 3;  // the worker's own processes in its cgroup: never counted as spawns

  // `between`, when given, is called every kSliceMs while the reply is awaited; the seconds it
  // returns are added to the deadline (the time the process was stopped: GpuUse::yield_for_timer).
  Reply request(const Json& message, double timeout_s, const std::function<double()>& between = {});
  static constexpr int kSliceMs = 50;
  // Names this worker's candidate to the judge (its history is kept per candidate).
  std::string id() const { return work_dir.filename().string(); }
  // Exit status or "still running" for evidence, after a kill.
  std::string describe_exit() const;
};

// What a worker's pids cgroup counted: trusted facts, read by the orchestrator outside the
// sandbox (the candidate cannot reset them as it can the in-process guard's counters).
struct PidsFacts {
  bool available = false;  // the worker has a pids cgroup
  long limit_hits = 0;     // forks/clones refused at pids.max (pids.events "max")
  long peak = -1;          // pids.peak (cgroup v2, newer kernels); -1 when absent
  long tasks = -1;         // pids.current (processes and threads) now
  long processes = 0;      // processes alive in the group now (cgroup.procs)
  Json to_json() const;
};
PidsFacts read_pids(const Worker& w);
// Worker::base_processes: bwrap, its pid-1 and the interpreter when started by exec; the holder's
// three (bwrap, its pid-1, sleep), the leader and the interpreter when forked by the zygote.
// More spawned processes than this is a flood (rules.MAX_SPAWNS in the worker says the same).
inline constexpr long kMaxSpawns = 16;
// Non-empty when the cgroup's counters show a process flood: the evidence, in words.
std::string process_flood_evidence(const PidsFacts& f, int max_tasks, long base_processes);

// Starts a worker ("judge" or "candidate") without waiting for its greeting: forked by `zygote`
// when one is given and can (zygote.h), else by exec, importing torch on its own while we do other
// work (pre-warming); `exec_note` (optional) then says why not the zygote. The child (a sandboxed
// candidate's holder) dies with the *thread* that forks it (PR_SET_PDEATHSIG), so spawn only from
// threads that outlive the worker.
Result<std::unique_ptr<Worker>> spawn_worker(const std::string& kind, const PythonEnv& py,
                                             const std::filesystem::path& package_dir, const std::filesystem::path& work_dir,
                                             const std::vector<std::filesystem::path>& readable_dirs, const std::string& device,
                                             const Sandbox* sandbox, int threads, Zygote* zygote = nullptr,
                                             std::string* exec_note = nullptr, const std::vector<std::string>& extra_env = {});
// Waits for the worker's hello; kills it on failure.
Status await_hello(Worker& w, double start_timeout_s);
// One wait of at most `slice_s` for it: ok with w.hello still null when none came yet.
Status await_hello_slice(Worker& w, double slice_s);
// spawn_worker + await_hello.
Result<std::unique_ptr<Worker>> start_worker(const std::string& kind, const PythonEnv& py,
                                             const std::filesystem::path& package_dir, const std::filesystem::path& work_dir,
                                             const std::vector<std::filesystem::path>& readable_dirs, const std::string& device,
                                             const Sandbox* sandbox, int threads, double start_timeout_s);


// Runs a tiny CUDA op on `device` in a fresh process; ok when the GPU still works.
Status gpu_health_check(const PythonEnv& py, const std::string& device, double timeout_s);

}  // namespace kernelllm::harness
