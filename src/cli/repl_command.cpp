// `kernelllm repl`: opens the model (open_engine) and runs the REPL (pipeline/repl.h) on the
// terminal or a pipe — stdin read directly, output on stdout. Parsing and setup only.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/devices.h"
#include "cli/endpoint_args.h"
#include "cli/hub.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"
#include "kernelllm/pipeline/repl.h"

namespace kernelllm::cli {
namespace {

struct ReplArgs {
  std::string model = "facebook/KernelLLM";
  HubOptions hub;
  std::string device;  // empty: resolve_gen_device's default
  int threads = 0;
  int k = 10;
  float temperature = kKernelLLMTemperature;
  float top_p = kKernelLLMTopP;
  std::optional<uint64_t> seed;
  int max_new_tokens = 2048;
  int rounds = 1;
  std::string template_file;
  std::string verify_device;  // empty: resolve_verify_devices's default
  std::string profile = "strict";
  int jobs = 0;
  bool no_verify = false;
  bool no_sandbox = false;
  std::string work_dir;
  double gpu_memory_fraction = 0.0;
  bool model_given = false;  // --model on the command line (exclusive with --endpoint)
  EndpointArgs endpoint;
};

int fail(const Status& status) {
  std::fprintf(stderr, "kernelllm repl: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

int run_repl_command(const ReplArgs& args) {
  if (args.model_given && args.endpoint.given()) {
    std::fprintf(stderr, "kernelllm repl: expected one of --model and --endpoint, found both\n");
    return kExitUsage;
  }
  ReplOptions options;
  options.k = args.k;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling.temperature = args.temperature;
  options.sampling.top_p = args.top_p;
  options.seed = args.seed;
  options.rounds = args.rounds;
  if (Status s = validate(options.sampling); !s.ok()) {
    std::fprintf(stderr, "kernelllm repl: %s\n", s.to_string().c_str());
    return kExitUsage;
  }
  options.verify_enabled = !args.no_verify;
  options.verify.profile = args.profile;
  options.verify.jobs = args.jobs;
  options.verify.sandbox = !args.no_sandbox;
  if (options.verify_enabled) {
    auto devices = resolve_verify_devices(args.verify_device);
    if (!devices.ok()) {
      std::fprintf(stderr, "kernelllm repl: %s\n", devices.status().message().c_str());
      return kExitUsage;
    }
    options.verify.devices = *devices;
  }
  options.work_root = args.work_dir;
  options.interactive = ::isatty(STDIN_FILENO) == 1;

  Result<std::unique_ptr<CompletionSource>> source = error(ErrorCode::internal, "no source");
  Result<PromptTemplate> tmpl = error(ErrorCode::internal, "no template");
  if (args.endpoint.given() && !args.device.empty()) {
    std::fprintf(stderr, "kernelllm repl: --device is where the local model generates; with --endpoint the server generates\n");
    return kExitUsage;
  }
  if (args.endpoint.given()) {
    auto eopts = endpoint_options(args.endpoint);
    if (!eopts.ok()) return fail(eopts.status());
    tmpl = endpoint_prompt_template(eopts->prompt, args.template_file);
    if (!tmpl.ok()) return fail(tmpl.status());
    source = open_endpoint(*eopts);
  } else {
    auto dir = find_or_download_model(args.model, args.hub);
    if (!dir.ok()) return fail(dir.status());
    tmpl = load_prompt_template(*dir, args.template_file);
    if (!tmpl.ok()) return fail(tmpl.status());
    auto device = resolve_gen_device(args.device, "repl");
    if (!device.ok()) {
      std::fprintf(stderr, "kernelllm repl: %s\n", device.status().message().c_str());
      return kExitUsage;
    }
    EngineOptions engine;
    engine.model = dir->string();
    engine.device = *device;
    engine.threads = args.threads;
    engine.gpu_memory_fraction =
        engine_memory_fraction(*device, options.verify_enabled ? options.verify.devices : std::vector<std::string>{},
                               args.gpu_memory_fraction);
    source = open_engine(engine);
  }
  if (!source.ok()) return fail(source.status());
  options.prompt_template = tmpl->text;

  std::unique_ptr<LineReader> in = make_fd_line_reader(STDIN_FILENO);
  if (Status s = run_repl(**source, options, *in, std::cout); !s.ok()) return fail(s);
  return 0;
}

}  // namespace

void add_repl_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<ReplArgs>();
  CLI::App* cmd = app.add_subcommand("repl", "Interactive: paste a PyTorch module, get verified Triton candidates");
  CLI::Option* model = cmd->add_option("--model", args->model,
                                       "Model directory, or an HF id (org/name) from the HF cache, downloaded there "
                                       "first when missing")
                           ->capture_default_str();
  add_hub_options(cmd, args->hub);
  add_device_options(cmd, args->device, &args->verify_device);
  cmd->add_option("--threads", args->threads, "CPU threads; 0 uses all cores")->check(CLI::NonNegativeNumber);
  cmd->add_option("-k", args->k, "Samples per module (change with :k N)")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy (change with :temp T)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed for every module (default: a fresh random one each)");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Most tokens generated per sample")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "Refinement rounds (failing candidates' errors go back to the model)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--prompt-template", args->template_file,
                  "Template with one '{}' field (default: the model's kernelllm.py, else built-in)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--profile", args->profile, "Verifier profile: strict or kernelbench")
      ->check(CLI::IsMember({"strict", "kernelbench"}))
      ->capture_default_str();
  cmd->add_option("--jobs", args->jobs, "Parallel candidate workers; 0: min(cores, k)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-verify", args->no_verify, "Only generate and extract; no verification");
  cmd->add_flag("--no-sandbox", args->no_sandbox, "Run candidates unconfined (trusted code only)");
  cmd->add_option("--work-dir", args->work_dir, "Where each module's files go (default: a new temp dir)");
  add_gpu_memory_fraction_option(cmd, args->gpu_memory_fraction);
  add_endpoint_options(cmd, args->endpoint);
  cmd->callback([&run, args, model] {
    args->model_given = model->count() > 0;
    run = [args] { return run_repl_command(*args); };
  });
}

}  // namespace kernelllm::cli
