// The reports' "run" block (run_facts.h). The command line comes from /proc/self/cmdline so that
// no caller has to pass argv through; the driver version from the NVIDIA kernel module's file.
#include "kernelllm/base/run_facts.h"

#include <cctype>
#include <ctime>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

std::vector<std::string> command_line() {
  std::vector<std::string> argv;
  auto raw = read_text_file("/proc/self/cmdline", 1 << 20);
  if (!raw.ok()) return argv;
  size_t start = 0;
  while (start < raw->size()) {
    size_t end = raw->find('\0', start);
    if (end == std::string::npos) end = raw->size();
    argv.push_back(raw->substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

Json nvidia_driver() {
  auto text = read_text_file("/proc/driver/nvidia/version", 1 << 16);
  if (!text.ok()) return nullptr;
  std::string v = nvidia_driver_version(*text);
  return v.empty() ? Json(nullptr) : Json(v);
}

}  // namespace

std::string nvidia_driver_version(const std::string& proc_text) {
  // The first word after "Kernel Module" made of digits and dots alone, holding a dot: the
  // proprietary module's line has the version there, the open one's has "for x86_64" first.
  const std::string key = "Kernel Module";
  const size_t line_end = proc_text.find('\n');
  const std::string line = proc_text.substr(0, line_end);
  size_t at = line.find(key);
  if (at == std::string::npos) return {};
  at += key.size();
  while (at < line.size()) {
    at = line.find_first_not_of(" \t", at);
    if (at == std::string::npos) break;
    size_t end = line.find_first_of(" \t", at);
    if (end == std::string::npos) end = line.size();
    const std::string word = line.substr(at, end - at);
    if (word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos &&
        std::isdigit(static_cast<unsigned char>(word.front()))) {
      return word;
    }
    at = end;
  }
  return {};
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json run_facts(const Json& verifier_environment) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  Json facts = {{"kernelllm_version", KERNELLLM_VERSION},
                {"argv", command_line()},
                {"date_utc", utc_now()},
                {"host", host},
                {"nvidia_driver", nvidia_driver()},
                {"python_version", nullptr},
                {"torch", nullptr},
                {"triton", nullptr},
                {"devices", nullptr}};
  if (verifier_environment.is_object()) {
    for (const char* key : {"python_version", "torch", "triton", "devices"}) {
      if (verifier_environment.contains(key)) facts[key] = verifier_environment[key];
    }
  }
  return facts;
}

}  // namespace kernelllm
