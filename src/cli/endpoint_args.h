// The --endpoint options shared by optimize, repl and eval: generation through an OpenAI-compatible
// server (pipeline/endpoint.h) instead of the local engine. Parsing only; the API key is read from
// the environment here and never printed.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "kernelllm/pipeline/endpoint.h"

namespace kernelllm::cli {

struct EndpointArgs {
  std::string url;
  std::string model;
  std::string prompt = "kernelllm";
  std::string api_key_env;  // empty: OPENAI_API_KEY, optional
  int max_n = EndpointOptions{}.max_n;
  int parallel = EndpointOptions{}.parallel;
  double timeout_s = EndpointOptions{}.timeout_s;
  int retries = EndpointOptions{}.retries;
  bool given() const { return !url.empty(); }
};

void add_endpoint_options(CLI::App* cmd, EndpointArgs& args);

// EndpointOptions from the arguments and the environment: the key from --api-key-env's variable
// (an error when that one is unset or empty) or from OPENAI_API_KEY when set; the model from
// GET {url}/models when --endpoint-model is not given.
Result<EndpointOptions> endpoint_options(const EndpointArgs& args);

}  // namespace kernelllm::cli
