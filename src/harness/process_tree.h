// Internal to the harness: what subprocess.cpp and process_tree.cpp share about process trees.
#pragma once

#include <sys/types.h>

#include <optional>

namespace kernelllm::harness {

// The parent of `pid` from /proc/<pid>/stat (field 4, after the parenthesised comm); nullopt when
// the process is gone or the file cannot be parsed.
std::optional<pid_t> parent_pid_of(pid_t pid);

}  // namespace kernelllm::harness
