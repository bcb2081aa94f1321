// The --endpoint options of optimize, repl and eval (see endpoint_args.h).
#include "cli/endpoint_args.h"

#include <cstdlib>

#include <fmt/format.h>

namespace kernelllm::cli {

void add_endpoint_options(CLI::App* cmd, EndpointArgs& a) {
  const std::string group = "Generation through an OpenAI-compatible endpoint (instead of --model)";
  cmd->add_option("--endpoint", a.url,
                  "Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama.cpp, "
                  "kernelllm serve, a hosted API)")
      ->group(group);
  cmd->add_option("--endpoint-model", a.model, "The model name sent in each request (default: the server's only model)")
      ->group(group);
  cmd->add_option("--endpoint-prompt", a.prompt,
                  "kernelllm: KernelLLM's prompt to /completions; chat: an instruction and the module as a user "
                  "message to /chat/completions (instruction models)")
      ->check(CLI::IsMember({"kernelllm", "chat"}))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--api-key-env", a.api_key_env,
                  "Environment variable holding the API key, sent as a Bearer token (default OPENAI_API_KEY, when set)")
      ->group(group);
  cmd->add_option("--endpoint-max-n", a.max_n,
                  "Most samples asked in one request; more are split over several (lowered when the server refuses n)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--endpoint-parallel", a.parallel, "Requests in flight at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--endpoint-timeout", a.timeout_s, "Seconds one request may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(group);
  cmd->add_option("--endpoint-retries", a.retries,
                  "Retries of a request on 429/5xx/connection errors (exponential backoff with jitter, Retry-After honoured)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str()
      ->group(group);
}

Result<EndpointOptions> endpoint_options(const EndpointArgs& a) {
  EndpointOptions o;
  o.base_url = a.url;
  o.model = a.model;
  KLLM_ASSIGN_OR_RETURN(o.prompt, parse_endpoint_prompt(a.prompt));
  o.max_n = a.max_n;
  o.parallel = a.parallel;
  o.timeout_s = a.timeout_s;
  o.retries = a.retries;
  if (!a.api_key_env.empty()) {
    o.api_key_env = a.api_key_env;
    const char* key = std::getenv(a.api_key_env.c_str());
    if (key == nullptr || *key == '\0') {
      return error(ErrorCode::invalid_argument,
                   fmt::format("--api-key-env {}: expected the API key in ${}, found it {}", a.api_key_env, a.api_key_env,
                               key == nullptr ? "unset" : "empty"));
    }
    o.api_key = key;
  } else if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr) {
    o.api_key = key;
  }
  KLLM_RETURN_IF_ERROR(validate(o));
  if (o.model.empty()) {
    KLLM_ASSIGN_OR_RETURN(o.model, endpoint_only_model(o));
  }
  return o;
}

}  // namespace kernelllm::cli
