// `kernelllm generate`: one prompt (raw text, a file, or a PyTorch module put into the Triton
// template) → n sampled completions on the CPU or CUDA engine. Completions go to stdout, the run
// summary to stderr, and everything optionally to a JSON file. Parsing and printing only.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/devices.h"
#include "kernelllm/base/file.h"
#include "kernelllm/base/json.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"

namespace kernelllm::cli {
namespace {

struct GenerateArgs {
  std::string model;
  HubOptions hub;
  std::string prompt;
  std::string prompt_file;
  std::string module_file;
  std::string template_file;
  int32_t num_samples = 1;
  float temperature = kKernelLLMTemperature;
  float top_p = kKernelLLMTopP;
  int32_t top_k = 0;
  std::optional<uint64_t> seed;
  int32_t max_new_tokens = 2048;
  bool stream = false;
  int threads = 0;
  std::string device;  // empty: resolve_gen_device's default
  std::string json_file;
};

int fail(const Status& status) {
  std::fprintf(stderr, "kernelllm generate: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

struct Prompt {
  std::string text;
  std::string source;           // "--prompt", a file, or "module FILE"
  std::string template_source;  // empty unless --module
};

Result<Prompt> build_prompt(const GenerateArgs& args, const std::filesystem::path& model_dir) {
  if (!args.prompt_file.empty()) {
    KLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(args.prompt_file));
    return Prompt{std::move(text), args.prompt_file, ""};
  }
  if (!args.module_file.empty()) {
    KLLM_ASSIGN_OR_RETURN(std::string code, read_text_file(args.module_file));
    KLLM_ASSIGN_OR_RETURN(PromptTemplate tmpl, load_prompt_template(model_dir, args.template_file));
    KLLM_ASSIGN_OR_RETURN(std::string text, format_triton_prompt(tmpl.text, code));
    return Prompt{std::move(text), "module " + args.module_file, tmpl.source};
  }
  return Prompt{args.prompt, "--prompt", ""};
}

Status write_json(const GenerateArgs& args, const std::filesystem::path& model_dir, const Prompt& prompt, uint64_t seed,
                  const std::vector<Completion>& completions, const GenerateStats& stats) {
  Json samples = Json::array();
  for (const auto& c : completions) {
    samples.push_back({{"text", c.text}, {"tokens", c.tokens}, {"finish", finish_reason_name(c.finish)}});
  }
  Json doc = {
      {"model", model_dir.string()},
      {"prompt_source", prompt.source},
      {"prompt_template", prompt.template_source},
      {"sampling",
       {{"n", args.num_samples},
        {"temperature", args.temperature},
        {"top_p", args.top_p},
        {"top_k", args.top_k},
        {"seed", seed},
        {"max_new_tokens", args.max_new_tokens}}},
      {"samples", samples},
      {"stats",
       {{"prompt_tokens", stats.prompt_tokens},
        {"generated_tokens", stats.generated_tokens},
        {"prefill_ms", stats.prefill_ms},
        {"decode_ms", stats.decode_ms}}},
  };
  // Invalid UTF-8 cannot occur (the decoder replaces it), but never let the dump throw.
  const std::string text = doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  if (args.json_file == "-") {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return {};
  }
  std::ofstream out(args.json_file);
  out << text;
  if (!out) return error(ErrorCode::io_error, args.json_file + ": cannot write the JSON report");
  return {};
}

int run_generate(const GenerateArgs& args) {
  SamplingParams sampling;
  sampling.temperature = args.temperature;
  sampling.top_p = args.top_p;
  sampling.top_k = args.top_k;
  sampling.seed = args.seed ? *args.seed : std::random_device{}();
  if (Status s = validate(sampling); !s.ok()) {
    std::fprintf(stderr, "kernelllm generate: %s\n", s.to_string().c_str());
    return kExitUsage;
  }

  auto device = resolve_gen_device(args.device, "generate");
  if (!device.ok()) {
    std::fprintf(stderr, "kernelllm generate: %s\n", device.status().message().c_str());
    return kExitUsage;
  }
  auto dir = find_or_download_model(args.model, args.hub);
  if (!dir.ok()) return fail(dir.status());
  auto prompt = build_prompt(args, *dir);
  if (!prompt.ok()) return fail(prompt.status());
  EngineOptions engine_options;
  engine_options.model = dir->string();
  engine_options.device = *device;
  engine_options.threads = args.threads;
  auto engine = open_engine_parts(engine_options);
  if (!engine.ok()) return fail(engine.status());
  Backend& backend = *engine->backend;
  const Tokenizer& tokenizer = *engine->tokenizer;

  auto ids = tokenizer.encode(prompt->text, /*add_special_tokens=*/true);
  if (!ids.ok()) return fail(ids.status().with_context("prompt"));

  GenerateOptions options;
  options.num_samples = args.num_samples;
  options.max_new_tokens = args.max_new_tokens;
  options.sampling = sampling;
  options.stop_ids = engine->stop_ids;
  options.skip_special_tokens = true;

  // With `--json -` stdout carries only the JSON; the completions go to stderr.
  std::FILE* text_out = args.json_file == "-" ? stderr : stdout;
  StreamCallback on_text;
  if (args.stream) {
    std::fprintf(text_out, "=== sample 0 ===\n");
    std::fflush(text_out);
    on_text = [text_out](int32_t sample, std::string_view text) {
      if (sample == 0) {
        std::fwrite(text.data(), 1, text.size(), text_out);
        std::fflush(text_out);
      }
      return true;
    };
  }
  GenerateStats stats;
  auto completions = generate(backend, tokenizer, *ids, options, on_text, &stats);
  if (!completions.ok()) return fail(completions.status());

  for (size_t i = 0; i < completions->size(); ++i) {
    const Completion& c = (*completions)[i];
    if (args.stream && i == 0) {
      std::fprintf(text_out, "\n=== end of sample 0 (%zu tokens, %s) ===\n", c.tokens.size(), finish_reason_name(c.finish).data());
      continue;
    }
    std::fprintf(text_out, "=== sample %zu (%zu tokens, %s) ===\n%s\n", i, c.tokens.size(), finish_reason_name(c.finish).data(),
                c.text.c_str());
  }
  std::fflush(text_out);
  double decode_tok_s = stats.decode_ms > 0 ? static_cast<double>(stats.generated_tokens) * 1000.0 / stats.decode_ms : 0.0;
  std::fprintf(stderr,
               "prompt tokens: %lld, generated tokens: %lld, prefill: %.1f ms, decode: %.2f tok/s (%s backend, "
               "seed %llu)\n",
               static_cast<long long>(stats.prompt_tokens), static_cast<long long>(stats.generated_tokens),
               stats.prefill_ms, decode_tok_s, std::string(backend.name()).c_str(),
               static_cast<unsigned long long>(sampling.seed));
  if (!args.json_file.empty()) {
    if (Status s = write_json(args, *dir, *prompt, sampling.seed, *completions, stats); !s.ok()) return fail(s);
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandRun& run) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample completions of one prompt with the engine");
  cmd->add_option("--model", args->model,
                  "Model directory, or an HF id (org/name) from the HF cache, downloaded there first when missing")
      ->required();
  add_hub_options(cmd, args->hub);
  CLI::Option_group* input = cmd->add_option_group("prompt", "Exactly one prompt source");
  input->add_option("--prompt", args->prompt, "Prompt text, used verbatim");
  input->add_option("--prompt-file", args->prompt_file, "File whose content is the prompt, verbatim")
      ->check(CLI::ExistingFile);
  input->add_option("--module", args->module_file,
                    "PyTorch module file put into the Triton prompt template (as generate_triton does)")
      ->check(CLI::ExistingFile);
  input->require_option(1);
  cmd->add_option("--prompt-template", args->template_file,
                  "Template for --module with one '{}' field (default: the model's kernelllm.py, else built-in)")
      ->check(CLI::ExistingFile);
  cmd->add_option("-n,--num-samples", args->num_samples, "Number of completions")->check(CLI::Range(1, 4096));
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens; 0 disables")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed (default: random, printed in the summary)");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Most tokens generated per sample")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--stream", args->stream, "Print sample 0 as it is generated; the others follow when done");
  add_device_options(cmd, args->device, nullptr);
  cmd->add_option("--threads", args->threads, "CPU threads; 0 uses all cores")->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", args->json_file, "Also write completions and stats to this JSON file; - writes them to stdout (the text then goes to stderr)");
  cmd->callback([&run, args] { run = [args] { return run_generate(*args); }; });
}

}  // namespace kernelllm::cli
