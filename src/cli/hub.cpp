// --model's HF ids: the cache first, then a download with huggingface_hub (python/kernelllm/hub.py
// run by the Python the package was installed for). The child's stderr is ours (its progress
// bar shows), its stdin is /dev/null, and its stdout carries one JSON reply line.
#include "cli/hub.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/workers.h"
#include "kernelllm/base/json.h"
#include "kernelllm/engine/model.h"

extern char** environ;

namespace kernelllm::cli {
namespace {

namespace fs = std::filesystem;

std::string hub_python() {
  if (const char* p = std::getenv("KERNELLLM_HUB_PYTHON"); p && *p) return p;
  return harness::choose_python("");
}

// Runs hub.py by its path, without the package's __init__ (which needs the native module) and
// without the current directory on sys.path.
constexpr const char* kBoot =
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "import runpy; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

struct ChildResult {
  int status = 0;   // waitpid status
  std::string out;  // all of stdout
};

Result<ChildResult> run_child(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return error(ErrorCode::io_error, std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);  // dup2 clears CLOEXEC on the copy
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return error(ErrorCode::not_found, fmt::format("cannot run {} ({})", args[0], std::strerror(rc)));
  }
  ChildResult r;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      if (r.out.size() < (size_t{1} << 20)) r.out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

ErrorCode code_for(const std::string& kind) {
  if (kind == "not_found" || kind == "offline" || kind == "missing_library") return ErrorCode::not_found;
  if (kind == "invalid") return ErrorCode::invalid_argument;
  if (kind == "unsupported") return ErrorCode::unsupported;
  return ErrorCode::io_error;  // gated, unreachable, incomplete, interrupted, failed
}

Result<fs::path> download(const std::string& model, const HubOptions& hub) {
  auto package_dir = harness::find_package_dir("");
  if (!package_dir.ok()) return package_dir.status().with_context("model \"" + model + "\": cannot download it");
  const fs::path script = *package_dir / "kernelllm" / "hub.py";
  const std::string python = hub_python();
  std::vector<std::string> args = {python, "-c", kBoot, script.string(), "download", model, "--json"};
  if (!hub.revision.empty()) {
    args.emplace_back("--revision");
    args.push_back(hub.revision);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  auto child = run_child(args);
  const std::string fetch_yourself = "or fetch it with `hf download " + model + "` and run with --offline";
  if (!child.ok()) {
    return error(ErrorCode::not_found,
                 fmt::format("model \"{}\" is not in the HF cache and {}; to download it kernelllm needs a Python with "
                             "huggingface_hub (set KERNELLLM_HUB_PYTHON to one), {}",
                             model, child.status().message(), fetch_yourself));
  }
  // The reply is the last line; anything before it is not ours to read.
  std::string line = child->out;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  if (const size_t nl = line.rfind('\n'); nl != std::string::npos) line = line.substr(nl + 1);
  auto reply = parse_json(line, "hub.py reply");
  if (!reply.ok() || !reply->is_object()) {
    const int st = child->status;
    const std::string how = WIFEXITED(st) ? fmt::format("exit code {}", WEXITSTATUS(st))
                                          : fmt::format("signal {}", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return error(ErrorCode::io_error, fmt::format("model \"{}\": the download with {} {} failed ({}, no reply; its "
                                                  "messages are above); {}",
                                                  model, python, script.string(), how, fetch_yourself));
  }
  if (auto e = reply->find("error"); e != reply->end() && e->is_string()) {
    return error(code_for(reply->value("kind", std::string("failed"))), "model \"" + model + "\": " + e->get<std::string>());
  }
  auto p = reply->find("path");
  if (p == reply->end() || !p->is_string()) {
    return error(ErrorCode::io_error, fmt::format("model \"{}\": hub.py replied without a path: {}", model, line));
  }
  const fs::path dir(p->get<std::string>());
  if (auto missing = missing_model_files(dir); !missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return error(ErrorCode::not_found, fmt::format("model \"{}\": the downloaded snapshot {} lacks {}", model, dir.string(), list));
  }
  return dir;
}

}  // namespace

void add_hub_options(CLI::App* cmd, HubOptions& hub) {
  cmd->add_option("--revision", hub.revision,
                  "Branch, tag or commit of an HF id --model (default main); downloaded when not cached");
  cmd->add_flag("--offline", hub.offline,
                "Never download: an HF id --model must be complete in the HF cache (as HF_HUB_OFFLINE=1)");
}

bool hub_offline(const HubOptions& hub) {
  if (hub.offline) return true;
  const char* v = std::getenv("HF_HUB_OFFLINE");
  if (v == nullptr) return false;
  std::string s(v);
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s == "1" || s == "ON" || s == "YES" || s == "TRUE";
}

Result<fs::path> find_or_download_model(const std::string& model, const HubOptions& hub) {
  auto found = resolve_model_path(model, hub.revision);
  if (found.ok() || found.status().code() != ErrorCode::not_found || !is_hub_repo_id(model)) return found;
  if (hub_offline(hub)) {
    return error(ErrorCode::not_found, found.status().message() +
                                           "\nOffline (--offline or HF_HUB_OFFLINE), so nothing was downloaded.");
  }
  return download(model, hub);
}

}  // namespace kernelllm::cli
