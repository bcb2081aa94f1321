// Host facts from /proc, read through read_text_file (errors are values, never exceptions).
#include "kernelllm/base/system.h"

#include <sstream>
#include <string>

#include "kernelllm/base/file.h"

namespace kernelllm {

uint64_t mem_available_bytes() {
  auto text = read_text_file("/proc/meminfo", size_t{1} << 20);
  if (!text.ok()) return 0;
  std::istringstream in(*text);
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    std::getline(in, unit);  // the rest of the line ("kB", or nothing for counters)
  }
  return 0;
}

}  // namespace kernelllm
