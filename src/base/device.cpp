// Device string parsing and GPU visibility (see device.h).
#include "kernelllm/base/device.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

namespace kernelllm {

std::string DeviceSpec::name() const {
  if (!cuda) return "cpu";
  return index < 0 ? "cuda" : fmt::format("cuda:{}", index);
}

Result<DeviceSpec> parse_device(std::string_view text, std::string_view what) {
  if (text == "cpu") return DeviceSpec{false, -1};
  if (text == "cuda") return DeviceSpec{true, -1};
  // cuda:N with 1..4 digits: no GPU host has more, and stoi cannot overflow.
  if (text.starts_with("cuda:") && text.size() > 5 && text.size() < 10 &&
      text.find_first_not_of("0123456789", 5) == std::string_view::npos) {
    return DeviceSpec{true, std::stoi(std::string(text.substr(5)))};
  }
  return error(ErrorCode::invalid_argument, fmt::format("{}: expected cpu, cuda or cuda:N, found \"{}\"", what, text));
}

bool gpu_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string_view s(v);
    if (s.empty() || s.starts_with("-1")) return false;
  }
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidiactl", ec);
}

}  // namespace kernelllm
