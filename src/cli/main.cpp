// `kernelllm` entry point: parses the command line and dispatches to one subcommand.
// Usage errors exit 2; failures exit 1 after printing the error; only main exits.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kernelllm: run KernelLLM with its own engine to write Triton kernels", "kernelllm"};
  app.set_version_flag("--version", std::string("kernelllm ") + KERNELLLM_VERSION);
  app.require_subcommand(1);
  // Every option's default shows in --help (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  kernelllm::cli::CommandRun run;
  kernelllm::cli::add_generate_command(app, run);
  kernelllm::cli::add_bench_command(app, run);
  kernelllm::cli::add_verify_command(app, run);
  kernelllm::cli::add_optimize_command(app, run);
  kernelllm::cli::add_eval_command(app, run);
  kernelllm::cli::add_repl_command(app, run);
  kernelllm::cli::add_serve_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kernelllm::cli::kExitUsage;
  }
  if (!run) {
    std::fputs(app.help().c_str(), stderr);
    return kernelllm::cli::kExitUsage;
  }
  return run();
}
