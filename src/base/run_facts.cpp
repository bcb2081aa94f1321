// The reports' "run" block (run_facts.h). The command line comes from /proc/self/cmdline so that
// no caller has to pass argv through; the driver version from the NVIDIA kernel module's file.
#include "kernelllm/base/run_facts.h"

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

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." → "550.54.15".
Json nvidia_driver() {
  auto text = read_text_file("/proc/driver/nvidia/version", 1 << 16);
  if (!text.ok()) return nullptr;
  const std::string key = "Kernel Module";
  size_t at = text->find(key);
  if (at == std::string::npos) return nullptr;
  at = text->find_first_not_of(' ', at + key.size());
  if (at == std::string::npos) return nullptr;
  const size_t end = text->find_first_of(" \n", at);
  return text->substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

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
