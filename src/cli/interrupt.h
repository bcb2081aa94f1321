// Ctrl-C / SIGTERM during verify and eval: a watcher thread stops the worker processes, removes
// this process's verifier run directories (kernelllm-verify-<pid>-* under /dev/shm or the temp
// dir: inputs and outputs held in RAM), says what was kept and how to resume, and exits
// 128 + the signal (130 for SIGINT, 143 for SIGTERM).
#pragma once

#include <string>

namespace kernelllm::cli {

// Installs the handlers. `kept` is printed after the clean-up (e.g. the run store and the
// command that resumes it); empty: "nothing was kept".
void install_interrupt_cleanup(const std::string& command, const std::string& kept);

// The command line as typed, from /proc/self/cmdline, shell-quoted where needed.
std::string quoted_command_line();

}  // namespace kernelllm::cli
