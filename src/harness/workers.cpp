// Worker start-up and request/reply rounds; the interpreter probe; the GPU health check.
#include "workers.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "kernelllm/base/file.h"
#include "kernelllm/harness/cache.h"
#include "zygote.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

namespace {

const char* kPassThrough[] = {"CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_PTXAS_PATH",
                              "TRITON_LIBCUDA_PATH", "NVIDIA_VISIBLE_DEVICES"};

constexpr const char* kProbeScript = R"(import sys, json, os, site
info = {'executable': sys.executable, 'python': sys.version.split()[0]}
paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
paths += site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p]
info['paths'] = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
import torch
info['torch'] = torch.__version__
try:
    import numpy
    info['numpy'] = numpy.__version__
except Exception:
    info['numpy'] = ''
try:
    import triton
    info['triton'] = triton.__version__
except Exception as e:
    info['triton'] = ''
if 'cuda' in sys.argv:
    info['cuda'] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
# What the answer rests on, for the probe cache: the interpreter and the packages' own files.
info['files'] = [os.path.realpath(sys.executable)] + [os.path.realpath(m.__file__) for m in
    (sys.modules.get(n) for n in ('torch', 'numpy', 'triton')) if m is not None and getattr(m, '__file__', None)]
print(json.dumps(info))
)";

std::vector<std::string> parent_env_subset() {
  std::vector<std::string> env;
  for (const char* k : kPassThrough) {
    if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
  }
  return env;
}

}  // namespace

std::string choose_python(const std::string& option) {
  if (!option.empty()) return option;
  if (const char* p = std::getenv("KERNELLLM_PYTHON"); p && *p) return p;
  return "python3";
}

Result<fs::path> find_package_dir(const std::string& option) {
  auto has_worker = [](const fs::path& d) { return fs::exists(d / "kernelllm" / "worker" / "launch.py"); };
  std::vector<fs::path> tried;
  if (!option.empty()) tried.emplace_back(option);
  if (const char* p = std::getenv("KERNELLLM_PACKAGE_DIR"); p && *p) tried.emplace_back(p);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path().parent_path().parent_path());  // site-packages/kernelllm/bin/kernelllm
#ifdef KERNELLLM_SOURCE_PYTHON_DIR
  tried.emplace_back(KERNELLLM_SOURCE_PYTHON_DIR);
#endif
  std::string list;
  for (const fs::path& d : tried) {
    if (has_worker(d)) return fs::absolute(d);
    list += (list.empty() ? "" : ", ") + d.string();
  }
  return error(ErrorCode::not_found, "kernelllm/worker/launch.py not found; looked in: " + list +
                                         " (set KERNELLLM_PACKAGE_DIR to the directory that contains kernelllm/)");
}

std::vector<std::string> worker_env(const fs::path& work_dir, const std::string& device, int threads) {
  std::vector<std::string> env = parent_env_subset();
  const std::string w = work_dir.string();
  for (const std::string& s : {std::string("PATH=/usr/local/bin:/usr/bin:/bin"), std::string("LANG=C.UTF-8"), "HOME=" + w + "/home",
                               "TMPDIR=" + w + "/tmp", "TRITON_CACHE_DIR=" + w + "/triton",
                               "TORCHINDUCTOR_CACHE_DIR=" + w + "/inductor", "XDG_CACHE_HOME=" + w + "/cache",
                               std::string("PYTHONDONTWRITEBYTECODE=1"), std::string("KERNELLLM_WORKER=1"),
                               fmt::format("OMP_NUM_THREADS={}", threads > 0 ? threads : 1)}) {
    env.push_back(s);
  }
  if (device == "cpu") env.emplace_back("TRITON_INTERPRET=1");
  for (const char* d : {"home", "tmp", "triton", "inductor", "cache"}) {
    std::error_code ec;
    fs::create_directories(work_dir / d, ec);
  }
  return env;
}

std::vector<std::string> worker_launch_env(const std::string& kind, const fs::path& work_dir, const std::string& device,
                                           int threads, const std::vector<std::string>& extra) {
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  std::vector<std::string> env = worker_env(work_dir, device, threads);
  // The judge makes its CUDA context before its greeting, which is awaited without holding the
  // GPU (a context takes ~0.5 s, longer with a dozen processes making theirs at once); a
  // candidate's process makes its own when its code loads.
  if (kind == "judge" && device.starts_with("cuda")) env.push_back("KERNELLLM_JUDGE_DEVICE=" + device);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

namespace {

// The probe's answer (its JSON, or the probe cache's copy of it). Throws Json::exception on a
// member of the wrong type.
PythonEnv env_from_json(const Json& j, const std::string& python) {
  PythonEnv env;
  env.executable = j.value("executable", python);
  env.python_version = j.value("python", "");
  env.torch_version = j.value("torch", "");
  env.triton_version = j.value("triton", "");
  env.numpy_version = j.value("numpy", "");
  env.cuda_names = j.value("cuda", std::vector<std::string>{});
  env.paths = j.value("paths", std::vector<std::string>{});
  env.files = j.value("files", std::vector<std::string>{});
  return env;
}

Json env_to_json(const PythonEnv& env) {
  return Json{{"executable", env.executable}, {"python", env.python_version}, {"torch", env.torch_version},
              {"triton", env.triton_version}, {"numpy", env.numpy_version}, {"cuda", env.cuda_names},
              {"paths", env.paths}, {"files", env.files}};
}

Result<PythonEnv> run_python_probe(const std::string& python, bool cuda) {
  SpawnOptions o;
  o.argv = {python, "-c", kProbeScript};
  if (cuda) o.argv.emplace_back("cuda");
  for (char** e = environ; *e; ++e) o.env.emplace_back(*e);  // trusted: our own environment
  o.protocol_fds = false;
  KLLM_ASSIGN_OR_RETURN(Process p, Process::spawn(o));
  auto exit = p.wait(deadline_in(180));
  if (!exit) {
    p.kill_tree();
    return error(ErrorCode::io_error, fmt::format("{}: probing torch/triton took more than 180 s", python));
  }
  if (!exit->exited || exit->code != 0) {
    return error(ErrorCode::not_found, fmt::format("{} cannot import torch ({}): {}", python, exit->describe(), p.stderr_tail()));
  }
  std::string out = p.stdout_tail();
  size_t nl = out.rfind('{');
  KLLM_ASSIGN_OR_RETURN(Json j, parse_json(nl == std::string::npos ? out : out.substr(nl), "python probe"));
  return env_from_json(j, python);
}

// A file's identity for the probe cache: "mtime_ns size", or "" when it cannot be read.
std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return fmt::format("{} {}", static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec,
                     static_cast<long long>(st.st_size));
}

// The interpreter as the probe starts it: `found` (as given, else the first on PATH; a venv's
// bin/python links to the base binary, so the venv is known by this path) and `binary`, the ELF
// file it resolves to ("" for a script or shim, e.g. pyenv's, which may pick another interpreter
// by directory or setting: its answer is never kept).
struct Interpreter {
  std::string found, binary;
};

Interpreter locate(const std::string& python) {
  Interpreter in{find_executable(python), ""};
  if (in.found.empty()) return in;
  in.found = fs::absolute(in.found).string();
  std::error_code ec;
  const fs::path real = fs::canonical(in.found, ec);
  if (ec) return in;
  std::ifstream f(real, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  if (f && std::string_view(magic, 4) == "\x7f" "ELF") in.binary = real.string();
  return in;
}

}  // namespace

std::string interpreter_path_before_probe(const std::string& python) {
  const Interpreter in = locate(python);
  return in.binary.empty() ? std::string() : in.found;  // found: the venv's own path, not the file it links to
}

std::string zygote_interpreter(const std::string& early, const std::string& probed) {
  const bool same = !early.empty() && fs::absolute(early).lexically_normal() == fs::absolute(probed).lexically_normal();
  return same ? early : probed;
}

namespace {

// The cache file for `in` and `cuda`: named by everything else that decides the answer, the
// environment the interpreter imports under and, with `cuda`, the GPUs the driver lists (their
// model names, read without starting CUDA).
fs::path probe_cache_file(const Interpreter& in, bool cuda) {
  std::string ctx = fmt::format("{}\n{}\n{}\n{}\n", kProbeScript, in.found, in.binary, cuda);
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
                        "LD_LIBRARY_PATH"}) {
    const char* v = std::getenv(k);
    ctx += fmt::format("{}={}\n", k, v ? v : "(unset)");
  }
  if (cuda) {
    std::error_code ec;
    std::vector<std::string> gpus;
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      std::ifstream info(e.path() / "information");
      gpus.push_back(e.path().filename().string() + ":" + std::string(std::istreambuf_iterator<char>(info), {}));
    }
    std::sort(gpus.begin(), gpus.end());
    for (const std::string& g : gpus) ctx += g + "\n";
  }
  return default_cache_path().parent_path() / fmt::format("python-probe-{}.json", sha256_hex(ctx).substr(0, 24));
}

std::optional<PythonEnv> read_probe_cache(const fs::path& file, const Interpreter& in, const std::string& python) {
  auto text = read_text_file(file, 1 << 20);
  if (!text.ok()) return std::nullopt;
  Json j = Json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("stamps") || !j["stamps"].is_object() || !j.contains("env") || !j["env"].is_object()) {
    return std::nullopt;
  }
  // Every file the answer rests on as it was then (write_probe_cache): a reinstall, an upgrade,
  // a package added or another venv at the same path changes one of them.
  const Json& stamps = j["stamps"];
  if (!stamps.contains(in.binary)) return std::nullopt;
  for (const auto& [path, stamp] : stamps.items()) {
    if (!stamp.is_string() || stamp.get<std::string>().empty() || file_stamp(path) != stamp.get<std::string>()) return std::nullopt;
  }
  try {
    return env_from_json(j["env"], python);
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

void write_probe_cache(const fs::path& file, const Interpreter& in, const PythonEnv& env) {
  // The binary, the packages' own files, every site-packages directory (a package installed or
  // removed changes it) and a venv's pyvenv.cfg (a venv remade at the same path).
  Json stamps = Json::object();
  for (const std::string& f : env.files) stamps[f] = file_stamp(f);
  stamps[in.binary] = file_stamp(in.binary);
  for (const std::string& d : env.paths) {
    if (d.ends_with("site-packages") || d.ends_with("dist-packages")) stamps[d] = file_stamp(d);
  }
  if (const fs::path cfg = fs::path(in.found).parent_path().parent_path() / "pyvenv.cfg"; fs::exists(cfg)) {
    stamps[cfg.string()] = file_stamp(cfg.string());
  }
  const Json j{{"what", "kernelllm's probe of a Python interpreter (torch, Triton, NumPy, GPUs); remade when a stamp changes"},
               {"stamps", stamps},
               {"env", env_to_json(env)}};
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + fmt::format(".{}.tmp", ::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1);
    if (!out) return;  // best effort: the next call probes again
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

Result<PythonEnv> probe_python(const std::string& python, bool cuda) {
  // Once per process, interpreter and visible GPUs: the probe imports torch and Triton (~3 s), and
  // `eval` verifies every (problem, profile) with a verify call of its own. Failures are not kept
  // (a fix then counts). Held while probing: the calls an `eval` begins at once wait for the first
  // one's answer (8 probes at once, beside the zygote's imports, took 4-5.6 s each on an H200 host).
  static std::mutex mu;
  static std::map<std::tuple<std::string, bool, std::optional<std::string>>, PythonEnv> probed;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const auto key = std::make_tuple(python, cuda, visible ? std::optional<std::string>(visible) : std::nullopt);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = probed.find(key); it != probed.end()) return it->second;
  // Then across processes (a `verify` call per problem): the file remade when any file the
  // answer rests on changed (read_probe_cache); only for an interpreter that is a binary (locate).
  const Interpreter in = locate(python);
  const fs::path file = in.binary.empty() ? fs::path() : probe_cache_file(in, cuda);
  std::optional<PythonEnv> cached = file.empty() ? std::nullopt : read_probe_cache(file, in, python);
  if (!cached) {
    KLLM_ASSIGN_OR_RETURN(PythonEnv env, run_python_probe(python, cuda));
    // No GPU seen when asked for may be passing (a driver being reloaded): asked again next time.
    if (!file.empty() && !(cuda && env.cuda_names.empty())) write_probe_cache(file, in, env);
    cached = std::move(env);
  }
  probed.emplace(key, *cached);
  return *cached;
}

namespace {

constexpr JsonMember kReplyMembers[] = {
    {"v", kJsonInteger},
    {"ok", kJsonBool},
    {"op", kJsonString},
    {"id", kJsonString},
    {"error", kJsonObject},
    {"pid", kJsonInteger},  // hello
    {"run_ms", kJsonNumber},
    {"triton_launches", kJsonInteger | kJsonNull},
    {"times_ms", kJsonArray, kJsonNumber},
    {"event_ms", kJsonNumber},  // time_call
    {"output_bound", kJsonBool},     // time_call
    {"output_unbound", kJsonString}, // time_call
    {"region", kJsonObject},         // time_region (judge)
    {"sets", kJsonArray, kJsonInteger},  // time_load
    {"slot", kJsonInteger},          // check_timed (judge)
    {"match", kJsonBool},  // compare
    {"verdict_hint", kJsonString},
    {"rule", kJsonString | kJsonNull},
    {"message", kJsonString},
    {"n_trials", kJsonInteger},  // load (judge)
    {"model_bytes", kJsonInteger},
    {"trial_distributions", kJsonArray, kJsonString},
    {"seed", kJsonInteger},  // make_inputs
    {"probe", kJsonBool},
    {"n_inputs", kJsonInteger},
    {"input_bytes", kJsonInteger},
    {"output_bytes", kJsonInteger},
    {"output_sizes", kJsonArray},
    {"kernel_profile", kJsonObject | kJsonNull},  // run (profile_kernels)
    {"load_verdict", kJsonObject | kJsonNull},    // audit_source
    {"after_correct", kJsonObject | kJsonNull},
    {"kernel_names", kJsonArray, kJsonString},
    {"violation", kJsonObject | kJsonNull},       // kernel_check
    {"steps_ms", kJsonObject},                    // time_prepare (judge)
    {"judge_ms", kJsonNumber},                    // check_timed (judge): its own time
    {"sync_ms", kJsonNumber},                     // check_timed (judge): of it, waiting for the device
};
constexpr JsonMember kErrorMembers[] = {
    {"kind", kJsonString}, {"message", kJsonString}, {"traceback", kJsonString}, {"rule", kJsonString}};

}  // namespace

std::string reply_shape_error(const Json& m) {
  if (!m.is_object()) return fmt::format("expected a JSON object, found {}", json_type_name(m));
  if (!m.contains("ok")) return "member 'ok' is missing";
  std::string e = json_members_error(m, kReplyMembers);
  if (e.empty() && m.contains("error")) e = json_members_error(m["error"], kErrorMembers, "error ");
  if (e.empty() && !m["ok"].get<bool>() && !m.contains("error")) e = "a failed reply without member 'error'";
  return e;
}

std::string Reply::error_kind() const {
  switch (status) {
    case ReceiveStatus::timeout: return "timeout";
    case ReceiveStatus::closed: return "closed";
    case ReceiveStatus::protocol_error: return "protocol";
    case ReceiveStatus::ok: break;
  }
  if (message.value("ok", false)) return "";
  const Json& e = message.contains("error") && message["error"].is_object() ? message["error"] : Json::object();
  return e.value("kind", "unknown");
}

std::string Reply::error_message() const {
  if (status != ReceiveStatus::ok) return error;
  const Json& e = message.contains("error") && message["error"].is_object() ? message["error"] : Json::object();
  return e.value("message", "");
}

Reply Worker::request(const Json& message, double timeout_s, const std::function<double()>& between) {
  Reply r;
  auto t0 = Clock::now();
  Deadline d = deadline_in(timeout_s);
  Json m = message;
  m["v"] = 1;
  // An id the worker cannot predict, echoed in its reply (protocol.serve): a frame the worker wrote
  // before this request arrived cannot pass for its reply (red team: one forged extra frame shifted
  // every later reply onto the next request, a load's reply read as a timed call's).
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) nonce = std::random_device{}();
  const std::string id = fmt::format("{:016x}", nonce);
  m["id"] = id;
  Status s = proc.send(m, d);
  if (!s.ok()) {
    r.status = Clock::now() >= d ? ReceiveStatus::timeout : ReceiveStatus::closed;
    r.error = s.message();
  } else {
    Received got;
    for (;;) {
      if (!between) {
        got = proc.receive(d);
        break;
      }
      const Deadline slice = std::min(d, deadline_in(kSliceMs / 1e3));
      got = proc.receive(slice);
      if (got.status != ReceiveStatus::timeout || got.error == "cancelled" || Clock::now() >= d) break;
      if (const double extra_s = between(); extra_s > 0) {
        d += std::chrono::duration_cast<Deadline::duration>(std::chrono::duration<double>(extra_s));
      }
    }
    r.status = got.status;
    r.message = std::move(got.message);
    r.error = std::move(got.error);
    if (r.status == ReceiveStatus::ok) {
      if (std::string bad = reply_shape_error(r.message); !bad.empty()) {
        r.status = ReceiveStatus::protocol_error;
        r.error = "malformed reply: " + bad;
      } else if (r.message.value("id", Json(nullptr)) != Json(id)) {
        r.status = ReceiveStatus::protocol_error;
        r.error = fmt::format("a reply that does not answer this '{}' request (its id is {}, not \"{}\"): a frame written "
                              "before the request", message.value("op", std::string("?")),
                              r.message.contains("id") ? r.message["id"].dump() : std::string("missing"), id);
      } else if (const Json& op = message.contains("op") ? message["op"] : Json(nullptr);
                 op.is_string() && r.message.value("ok", false) && r.message.value("op", Json(nullptr)) != op) {
        r.status = ReceiveStatus::protocol_error;
        r.error = fmt::format("the reply to '{}' came as '{}'", op.get<std::string>(),
                              r.message.contains("op") ? r.message["op"].dump() : std::string("(no op)"));
      }
    }
  }
  r.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r;
}

std::string Worker::describe_exit() const {
  return proc.exit_info() ? proc.exit_info()->describe() : std::string("still running");
}

Result<std::unique_ptr<Worker>> spawn_worker(const std::string& kind, const PythonEnv& py, const fs::path& package_dir,
                                             const fs::path& work_dir, const std::vector<fs::path>& readable_dirs,
                                             const std::string& device, const Sandbox* sandbox, int threads, Zygote* zygote,
                                             std::string* exec_note, const std::vector<std::string>& extra_env) {
  if (zygote) {
    auto forked = fork_worker(*zygote, kind, package_dir, work_dir, readable_dirs, device, sandbox, threads, extra_env);
    if (forked.ok()) return forked;
    if (exec_note) *exec_note = forked.status().message();
  }
  auto w = std::make_unique<Worker>();
  w->work_dir = work_dir;
  w->device = device;
  w->kind = kind;
  std::vector<std::string> argv = {py.executable, "-I", "-B", (package_dir / "kernelllm" / "worker" / "launch.py").string(), kind};
  std::vector<std::string> env = worker_launch_env(kind, work_dir, device, threads, extra_env);
  SpawnOptions opts;
  if (sandbox) {
    std::vector<fs::path> readable = readable_dirs;
    readable.push_back(package_dir);
    KLLM_ASSIGN_OR_RETURN(PreparedSpawn prep, sandbox->prepare(work_dir, readable, argv, std::move(env)));
    opts = std::move(prep.options);
    w->cgroup = std::move(prep.cgroup);
  } else {
    opts.argv = std::move(argv);
    opts.env = std::move(env);
    opts.cwd = work_dir.string();
  }
  opts.fd_channel = true;  // the judge's timing output region reaches the candidate through it
  KLLM_ASSIGN_OR_RETURN(w->proc, Process::spawn(opts));
  return w;
}

PidsFacts read_pids(const Worker& w) {
  PidsFacts f;
  if (!w.cgroup || w.cgroup->pids_dir.empty()) return f;
  const std::string& d = w.cgroup->pids_dir;
  f.available = true;
  std::ifstream events(d + "/pids.events");
  std::string key;
  long val = 0;
  while (events >> key >> val) {
    if (key == "max") f.limit_hits = val;
  }
  std::ifstream peak(d + "/pids.peak");
  if (long v = 0; peak >> v) f.peak = v;
  std::ifstream current(d + "/pids.current");
  if (long v = 0; current >> v) f.tasks = v;
  std::ifstream procs(d + "/cgroup.procs");
  for (long pid = 0; procs >> pid;) ++f.processes;
  return f;
}

Json PidsFacts::to_json() const {
  if (!available) return "not counted: the worker has no pids cgroup, so the process count rests on the in-process guard only";
  Json j{{"limit_hits", limit_hits}, {"tasks", tasks}, {"processes", processes}};
  if (peak >= 0) j["peak_tasks"] = peak;
  return j;
}

std::string process_flood_evidence(const PidsFacts& f, int max_tasks, long base_processes) {
  if (!f.available) return "";
  if (f.limit_hits > 0) {
    return fmt::format("the candidate's cgroup refused {} fork/clone(s) at its limit of {} tasks (pids.events max)", f.limit_hits,
                       max_tasks);
  }
  if (f.processes > base_processes + kMaxSpawns) {
    return fmt::format("{} processes alive in the candidate's cgroup after the run (more than {} spawned)",
                       f.processes - base_processes, kMaxSpawns);
  }
  return "";
}

namespace {

Status take_hello(Worker& w, Received hello) {
  std::string bad = hello.status == ReceiveStatus::ok ? reply_shape_error(hello.message) : hello.error;
  if (bad.empty() && !hello.message["ok"].get<bool>()) bad = hello.message.dump();
  if (!bad.empty()) {
    w.proc.kill_tree();
    return error(ErrorCode::io_error,
                 fmt::format("{} worker did not greet ({}; {}): {}", w.kind, bad, w.describe_exit(), w.proc.stderr_tail()));
  }
  w.hello = std::move(hello.message);
  return {};
}

}  // namespace

Status await_hello(Worker& w, double start_timeout_s) {
  if (!w.hello.is_null()) return {};
  return take_hello(w, w.proc.receive(deadline_in(start_timeout_s)));
}

Status await_hello_slice(Worker& w, double slice_s) {
  if (!w.hello.is_null()) return {};
  Received got = w.proc.receive(deadline_in(slice_s));
  if (got.status == ReceiveStatus::timeout && w.proc.running()) return {};
  return take_hello(w, std::move(got));
}

Result<std::unique_ptr<Worker>> start_worker(const std::string& kind, const PythonEnv& py, const fs::path& package_dir,
                                             const fs::path& work_dir, const std::vector<fs::path>& readable_dirs,
                                             const std::string& device, const Sandbox* sandbox, int threads,
                                             double start_timeout_s) {
  KLLM_ASSIGN_OR_RETURN(auto w, spawn_worker(kind, py, package_dir, work_dir, readable_dirs, device, sandbox, threads));
  KLLM_RETURN_IF_ERROR(await_hello(*w, start_timeout_s));
  return w;
}

Status gpu_health_check(const PythonEnv& py, const std::string& device, double timeout_s) {
  SpawnOptions o;
  o.argv = {py.executable, "-c",
            "import sys, torch; d = sys.argv[1]; x = torch.arange(1024, device=d, dtype=torch.float32); "
            "s = float((x * 2).sum()); torch.cuda.synchronize(d); assert s == 1047552.0, s; print('ok')",
            device};
  o.env = parent_env_subset();
  o.env.emplace_back("PATH=/usr/local/bin:/usr/bin:/bin");
  o.protocol_fds = false;
  KLLM_ASSIGN_OR_RETURN(Process p, Process::spawn(o));
  auto exit = p.wait(deadline_in(timeout_s));
  if (!exit) {
    p.kill_tree();
    return error(ErrorCode::internal, fmt::format("GPU health check on {} hung for {} s", device, timeout_s));
  }
  if (!exit->exited || exit->code != 0) {
    return error(ErrorCode::internal, fmt::format("GPU health check on {} failed ({}): {}", device, exit->describe(), p.stderr_tail()));
  }
  return {};
}

}  // namespace kernelllm::harness
