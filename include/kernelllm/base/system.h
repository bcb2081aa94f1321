// Facts about the host that several layers need (the verifier's memory pre-flight, bench records).
#pragma once

#include <cstdint>

namespace kernelllm {

// MemAvailable from /proc/meminfo in bytes; 0 when unknown (no /proc, unreadable, no such line).
uint64_t mem_available_bytes();

}  // namespace kernelllm
