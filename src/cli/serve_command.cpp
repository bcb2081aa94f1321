// `kernelllm serve --model DIR`: the OpenAI-compatible HTTP server (src/serve) over the engine on
// cpu or cuda, plus the optimize endpoint. Parsing, loading and signal handling only; prints
// "listening on http://HOST:PORT" on stderr once requests are accepted; SIGINT/SIGTERM stop it.
#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/devices.h"
#include "cli/table.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"
#include "kernelllm/serve/chat_template.h"
#include "kernelllm/serve/server.h"

namespace kernelllm::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  serve::ServeOptions serve;
  std::string model;
  HubOptions hub;
  std::string device;  // empty: resolve_gen_device's default
  std::string dtype = "bf16";
  int threads = 0;
  std::string random_weights;
  uint64_t seed = 0;
  double gpu_memory_fraction = 0.0;
  std::string verify_device;
  std::string profile = "strict";
  bool no_sandbox = false;
  bool no_cache = false;
  std::string cache_file;
  std::string work_dir;
  std::string template_file;
};

int fail(const Status& status) {
  std::fprintf(stderr, "kernelllm serve: error: %s\n", status.to_string().c_str());
  return kExitFailure;
}

int run_serve(ServeArgs& a) {
  // SIGINT/SIGTERM are taken by one thread: blocked here, before any thread exists (the engine's
  // pools, the HTTP workers), so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a dead server
  serve::ServeOptions& o = a.serve;
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("KERNELLLM_API_KEY")) o.api_key = env;
  }
  auto devices = resolve_verify_devices(a.verify_device);
  if (!devices.ok()) {
    std::fprintf(stderr, "kernelllm serve: %s\n", devices.status().message().c_str());
    return kExitUsage;
  }
  auto device = resolve_gen_device(a.device, "serve");
  if (!device.ok()) {
    std::fprintf(stderr, "kernelllm serve: %s\n", device.status().message().c_str());
    return kExitUsage;
  }
  a.device = *device;
  o.verify.devices = *devices;
  o.verify.profile = a.profile;
  o.verify.sandbox = !a.no_sandbox;
  o.verify.use_cache = !a.no_cache;
  o.verify.cache_path = a.cache_file;
  o.work_root = a.work_dir.empty() ? fs::temp_directory_path() / "kernelllm-serve" : fs::path(a.work_dir);

  auto model_dir = find_or_download_model(a.model, a.hub);
  if (!model_dir.ok()) return fail(model_dir.status());
  o.model_dir = *model_dir;
  if (o.model_name.empty()) o.model_name = a.model;
  auto tmpl = load_prompt_template(*model_dir, a.template_file);
  if (!tmpl.ok()) return fail(tmpl.status());
  o.prompt_template = tmpl->text;

  EngineOptions eo;
  eo.model = model_dir->string();
  eo.device = a.device;
  eo.threads = a.threads;
  eo.random_config = a.random_weights;
  eo.random_seed = a.seed;
  eo.dtype = a.dtype;
  eo.gpu_memory_fraction = engine_memory_fraction(a.device, o.verify.devices, a.gpu_memory_fraction);
  std::fprintf(stderr, "loading %s on %s\n",
               a.random_weights.empty() ? model_dir->c_str() : ("random " + a.random_weights + " weights").c_str(),
               a.device.c_str());
  auto engine = open_engine_parts(eo);
  if (!engine.ok()) return fail(engine.status());
  if (a.no_sandbox) print_no_sandbox_warning();
  if (auto chat = serve::load_chat_template(*model_dir); !chat.ok()) {
    std::fprintf(stderr, "note: /v1/chat/completions is refused for this model: %s\n", chat.status().message().c_str());
  }

  auto control = std::make_shared<serve::ServerControl>();
  std::thread([control, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "kernelllm serve: signal %d, stopping\n", sig);
    control->request_stop();
  }).detach();

  const std::string description = engine->description;
  Status s = serve::run_server(o, *engine, [&o, &description](int port) {
    std::fprintf(stderr, "serving %s (%s)%s\n", o.model_name.c_str(), description.c_str(),
                 o.api_key.empty() ? "" : ", API key required");
    std::fprintf(stderr, "listening on http://%s:%d\n", o.host.c_str(), port);
    std::fflush(stderr);
  }, control.get());
  if (!s.ok()) return fail(s);
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandRun& run) {
  auto a = std::make_shared<ServeArgs>();
  serve::ServeOptions& o = a->serve;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server over the engine, plus /v1/kernelllm/optimize");
  cmd->footer(
      "Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (Llama-3 chat format from the model's "
      "tokenizer_config.json), POST /v1/kernelllm/optimize, GET /health. Errors are OpenAI-style JSON bodies.");
  cmd->add_option("--model", a->model,
                  "Model directory, or an HF id (org/name) from the HF cache, downloaded there first when missing")
      ->required();
  add_hub_options(cmd, a->hub);
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port; 0 picks a free one (printed)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' on /v1/ (default $KERNELLLM_API_KEY)");
  cmd->add_option("--served-model-name", o.model_name, "The model id clients name (default: --model as given)");
  add_device_options(cmd, a->device, nullptr);
  cmd->add_option("--dtype", a->dtype, "CUDA weights: bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}))->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU engine threads; 0 uses all cores")->check(CLI::NonNegativeNumber);
  cmd->add_option("--random-weights", a->random_weights, "Random weights of a named shape (e.g. llama-3.1-8b): speed runs");
  cmd->add_option("--seed", a->seed, "Seed of --random-weights")->capture_default_str();
  add_gpu_memory_fraction_option(cmd, a->gpu_memory_fraction);
  cmd->add_option("--max-n", o.max_n, "Most choices (n) per request")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--max-tokens", o.max_tokens, "Most tokens per choice (max_tokens)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--max-sequences", o.max_sequences, "Live sequences over all requests (the batch)")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-kv-tokens", o.max_kv_tokens, "KV positions reserved at once over all requests; 0 unlimited")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--http-threads", o.http_threads, "HTTP handler threads (a streaming client holds one)")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  cmd->add_option("--max-k", o.max_k, "Optimize: most candidates per request")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--verify-device", a->verify_device,
                  "Optimize: where candidates are verified: cpu, cuda, cuda:N or a list (default: cuda when a GPU is visible, "
                  "else cpu)");
  cmd->add_option("--profile", a->profile, "Optimize: strict or kernelbench")
      ->check(CLI::IsMember({"strict", "kernelbench"}))
      ->capture_default_str();
  cmd->add_option("--prompt-template", a->template_file, "Optimize: prompt template with one '{}' field")->check(CLI::ExistingFile);
  cmd->add_option("--work-dir", a->work_dir, "Optimize: one directory per request under it (default $TMPDIR/kernelllm-serve)");
  cmd->add_flag("--no-sandbox", a->no_sandbox, "Optimize: run candidates unconfined (debugging only; prints a warning)");
  cmd->add_flag("--no-cache", a->no_cache, "Optimize: neither read nor write the verifier's result cache");
  cmd->add_option("--cache", a->cache_file, "Optimize: verifier result cache file");
  cmd->callback([&run, a] { run = [a] { return run_serve(*a); }; });
}

}  // namespace kernelllm::cli
