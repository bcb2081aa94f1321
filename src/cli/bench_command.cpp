// `kernelllm bench`: prefill and decode speed of a model directory or of seeded random
// weights of a named shape, on the CPU or a CUDA device; prints a table to stdout, progress
// to stderr, and optionally writes the JSON (bench/README.md). Parsing and printing only.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/devices.h"
#include "kernelllm/base/file.h"
#include "kernelllm/engine/bench.h"

namespace kernelllm::cli {
namespace {

struct BenchArgs {
  BenchOptions options;
  HubOptions hub;
  bool random_weights = false;
  bool no_cuda_graphs = false;
  std::string dtype = "bf16";
  std::string device;  // empty: resolve_gen_device's default
  std::string json_file;
  double memory_cap_gib = 0;
};

// The exact command line, from /proc/self/cmdline (arguments joined by spaces, quoted when needed).
std::string command_line() {
  auto raw = read_text_file("/proc/self/cmdline");
  if (!raw.ok()) return {};
  std::string out;
  std::string arg;
  const auto flush = [&] {
    if (!out.empty()) out += ' ';
    out += arg.find_first_of(" \t\"'$") == std::string::npos ? arg : "'" + arg + "'";
    arg.clear();
  };
  for (char ch : *raw) {
    if (ch == '\0') {
      flush();
    } else {
      arg += ch;
    }
  }
  if (!arg.empty()) flush();
  return out;
}

int run_bench_command(BenchArgs args) {
  if (!args.options.config.empty() && !args.random_weights) {
    std::fprintf(stderr, "kernelllm bench: --config needs --random-weights (use --model for a checkpoint)\n");
    return kExitUsage;
  }
  if (args.random_weights && args.options.config.empty()) {
    std::fprintf(stderr, "kernelllm bench: --random-weights needs --config NAME|config.json\n");
    return kExitUsage;
  }
  if (args.options.config.empty() == args.options.model.empty()) {
    std::fprintf(stderr, "kernelllm bench: expected exactly one of --model or --config with --random-weights\n");
    return kExitUsage;
  }
  auto device = resolve_gen_device(args.device, "bench");
  if (!device.ok()) {
    std::fprintf(stderr, "kernelllm bench: %s\n", device.status().message().c_str());
    return kExitUsage;
  }
  args.options.device = *device;
  if ((!args.options.cuda_plan.empty() || args.memory_cap_gib > 0) && args.options.device.rfind("cuda", 0) != 0) {
    std::fprintf(stderr, "kernelllm bench: --cuda-plan and --memory-cap need a cuda device, found %s\n",
                 args.options.device.c_str());
    return kExitUsage;
  }
  args.options.memory_cap_bytes = static_cast<uint64_t>(args.memory_cap_gib * 1073741824.0);
  if (!args.options.model.empty()) {
    auto model_dir = find_or_download_model(args.options.model, args.hub);
    if (!model_dir.ok()) {
      std::fprintf(stderr, "kernelllm bench: error: %s\n", model_dir.status().to_string().c_str());
      return kExitFailure;
    }
    args.options.model = model_dir->string();
  }
  args.options.dtype = args.dtype == "f16" ? DType::f16 : DType::bf16;
  args.options.cuda_graphs = !args.no_cuda_graphs;
  args.options.command_line = command_line();
  auto result = run_bench(args.options, [](std::string_view line) {
    std::fprintf(stderr, "kernelllm bench: %.*s\n", static_cast<int>(line.size()), line.data());
  });
  if (!result.ok()) {
    std::fprintf(stderr, "kernelllm bench: error: %s\n", result.status().to_string().c_str());
    return kExitFailure;
  }
  const std::string table = format_bench_table(*result);
  // With `--json -` stdout carries only the JSON; the table goes to stderr.
  std::fputs(table.c_str(), args.json_file == "-" ? stderr : stdout);
  if (args.json_file == "-") {
    std::fputs((result->dump(2) + "\n").c_str(), stdout);
  } else if (!args.json_file.empty()) {
    std::ofstream out(args.json_file);
    out << result->dump(2) << '\n';
    if (!out) {
      std::fprintf(stderr, "kernelllm bench: error: %s: cannot write the JSON report\n", args.json_file.c_str());
      return kExitFailure;
    }
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<BenchArgs>();
  BenchOptions& o = args->options;
  std::string shapes;
  for (const auto& name : named_config_names()) {
    if (!shapes.empty()) shapes += ", ";
    shapes += name;
  }
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed (tok/s, ms/step, GB/s)");
  cmd->add_option("--model", o.model,
                  "Model directory, or an HF id (org/name) from the HF cache, downloaded there first when missing");
  add_hub_options(cmd, args->hub);
  cmd->add_option("--config", o.config, "With --random-weights: a named shape (" + shapes + ") or a config.json path");
  cmd->add_flag("--random-weights", args->random_weights, "Seeded random weights of --config's shape");
  cmd->add_option("--seed", o.seed, "Seed of the random weights and the random prompt ids")->capture_default_str();
  add_device_options(cmd, args->device, nullptr);
  cmd->add_option("--dtype", args->dtype, "Weight (and CUDA KV) dtype")
      ->check(CLI::IsMember({"bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length (random ids)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--new-tokens", o.new_tokens, "Tokens generated per sequence (eos ignored)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("-n", o.n, "Sequences decoded together, a list: -n 1,10,20")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed rounds per n before measuring")
      ->check(CLI::Range(int64_t{0}, int64_t{100}))
      ->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "Draw each step's tokens at this temperature; 0 is greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Nucleus cut of sampled draws, in (0, 1]")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Keep the k most likely tokens of sampled draws; 0 keeps all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads; 0 uses all cores")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-cuda-graphs", args->no_cuda_graphs, "Do not capture decode steps in CUDA graphs");
  cmd->add_option("--cuda-plan", o.cuda_plan,
                  "Kernel plan text (docs/cuda-engine.md, Plan): portable, or key=value choices, comma-separated");
  cmd->add_option("--memory-cap", args->memory_cap_gib,
                  "GiB: run as on a GPU with this much memory (the rest is set aside first), e.g. 24")
      ->check(CLI::Range(1.0, 4096.0));
  cmd->add_option("--peer", o.peer, "Also time a peer on the same shape and prompt")->check(CLI::IsMember({"hf"}));
  cmd->add_option("--python", o.python, "Python for the peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "Path of bench/peer_hf.py (default: found above the executable)");
  cmd->add_option("--json", args->json_file, "Also write the results to this JSON file; - writes them to stdout (the table then goes to stderr)");
  cmd->callback([&run, args] { run = [args] { return run_bench_command(*args); }; });
}

}  // namespace kernelllm::cli
