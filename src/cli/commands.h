// The CLI's subcommands. Each registers its options on the top-level app and, when chosen,
// runs through the callback stored in `run`; the callback returns the process exit code
// (0 ok, 1 a failure reported with its Status, 2 a usage error).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace kernelllm::cli {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

using CommandRun = std::function<int()>;

void add_generate_command(CLI::App& app, CommandRun& run);
void add_bench_command(CLI::App& app, CommandRun& run);
void add_verify_command(CLI::App& app, CommandRun& run);
void add_optimize_command(CLI::App& app, CommandRun& run);
void add_eval_command(CLI::App& app, CommandRun& run);  // eval and `eval merge`
void add_repl_command(CLI::App& app, CommandRun& run);
void add_serve_command(CLI::App& app, CommandRun& run);

// --gpu-memory-fraction, shared by the commands that run the engine beside the verifier
// (optimize, repl, eval): 0 (unset) leaves the choice to engine_memory_fraction().
inline void add_gpu_memory_fraction_option(CLI::App* cmd, double& fraction) {
  cmd->add_option("--gpu-memory-fraction", fraction,
                  "Most of the GPU's memory the engine (weights + KV cache) may hold, in (0, 1] (default 0.5 when the "
                  "verifier uses the engine's GPU, else all free memory)")
      ->check(CLI::Range(0.01, 1.0));
}

}  // namespace kernelllm::cli
