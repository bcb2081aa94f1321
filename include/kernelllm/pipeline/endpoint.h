// A CompletionSource over an OpenAI-compatible HTTP endpoint (vLLM, SGLang, llama.cpp, our own
// `serve`, a hosted API): POST {base}/completions (KernelLLM's raw prompt) or {base}/chat/completions
// (the prompt as one user message), n split over several requests, retries with backoff. The wire
// helpers below are pure functions (unit-tested); open_endpoint() does the HTTP (cpp-httplib).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"

namespace kernelllm {

// kernelllm: the prompt as text to /completions (KernelLLM's template, for base models served
// raw); chat: the prompt as a user message to /chat/completions (instruction models).
enum class EndpointPrompt { kernelllm, chat };
Result<EndpointPrompt> parse_endpoint_prompt(std::string_view name);  // "kernelllm" | "chat"
std::string_view endpoint_prompt_name(EndpointPrompt form);

struct EndpointOptions {
  std::string base_url;  // "http://127.0.0.1:8000/v1" (scheme, host, optional port, optional path)
  std::string model;     // the request's "model"; empty: the endpoint's only model (GET {base}/models)
  EndpointPrompt prompt = EndpointPrompt::kernelllm;
  std::string api_key;             // sent as "Authorization: Bearer ..."; empty: no header
  std::string api_key_env = "OPENAI_API_KEY";  // where the key came from (named in 401/403 errors)
  int max_n = 16;                  // most completions asked in one request; lowered by a 400 naming n
  int parallel = 4;                // requests in flight at once
  double timeout_s = 600;          // per request: connect, send, and the wait for the answer
  int retries = 5;                 // after the first attempt, on 408/409/429/5xx and connection errors
  double backoff_s = 0.5;          // first retry's delay; doubles per retry, capped at kMaxBackoffS
};
inline constexpr double kMaxBackoffS = 30.0;

// Checks the options: an http(s) base URL that is not itself an endpoint path, max_n >= 1,
// parallel >= 1, timeout > 0, retries >= 0.
Status validate(const EndpointOptions& options);

// The facts a run records (reports, the eval run store): url, model, prompt form. Never the key.
Json endpoint_facts(const EndpointOptions& options);

// The endpoint's only model, from GET {base}/models ({"data": [{"id": ...}]}): an error unless it
// lists exactly one (naming them), or when the server cannot be reached.
Result<std::string> endpoint_only_model(const EndpointOptions& options);

// Opens the source: fills `model` from GET {base}/models when empty (an error unless the endpoint
// lists exactly one). describe() is "endpoint <url> model <name> (<form> prompt)".
Result<std::unique_ptr<CompletionSource>> open_endpoint(EndpointOptions options);

// The prompt template of an endpoint run: `override_file` when given, else our built-in template
// of the form (KernelLLM's shape for kernelllm, builtin_chat_prompt_template() for chat).
Result<PromptTemplate> endpoint_prompt_template(EndpointPrompt form, const std::filesystem::path& override_file);

// ---- wire format (pure) ------------------------------------------------------------------------

struct EndpointUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string path;              // "/v1" (no trailing slash; may be empty)
};
Result<EndpointUrl> parse_endpoint_url(std::string_view base_url);

// The JSON body of one request for `n` completions; sample_offset (the index of its first sample
// among all) is added to the seed, so that split requests do not repeat each other's samples.
Json endpoint_request_body(const EndpointOptions& options, const std::string& prompt, int n, int max_new_tokens,
                           const SamplingParams& sampling, int sample_offset);

struct EndpointChoices {
  std::vector<std::string> texts;  // by the choices' "index" (0..n-1)
  std::vector<std::string> finish_reasons;
  int64_t prompt_tokens = 0;       // usage; 0 when the server sends none
  int64_t completion_tokens = 0;
};
// Parses a 200 response of /completions (choices[].text) or /chat/completions
// (choices[].message.content; null content is ""). parse_error naming what is missing.
Result<EndpointChoices> parse_endpoint_response(std::string_view body, EndpointPrompt form);

// The server's error message from an error body: OpenAI's {"error": {"message"}}, vLLM's
// {"message"}, FastAPI's {"detail"}, {"error": "..."}, else the body itself (cut to 300 bytes).
std::string endpoint_error_message(std::string_view body);

// Whether an HTTP status is worth another attempt: 408, 409, 429 and 5xx.
bool endpoint_status_retryable(int status);

// A 400 refusing the request's n (its message names `n` or "choice"): the n to try next, the
// largest number in the message below `asked`, else half of it; nullopt when the message does not
// name n or `asked` is already 1.
std::optional<int> endpoint_smaller_n(std::string_view message, int asked);

// Seconds from a Retry-After header (delta-seconds; HTTP dates are not honoured) or OpenAI's
// retry-after-ms; nullopt when absent or malformed.
std::optional<double> endpoint_retry_after(std::string_view retry_after, std::string_view retry_after_ms);

// The delay before retry number `retry` (0-based): the server's Retry-After when given (capped at
// kMaxBackoffS), else backoff_s * 2^retry capped at kMaxBackoffS, times a jitter in [0.5, 1]
// (`unit` is a uniform draw in [0, 1)).
double endpoint_retry_delay_s(const EndpointOptions& options, int retry, std::optional<double> retry_after_s, double unit);

// How `n` samples are asked: chunks of at most max_n, in order ({5, 2} → {2, 2, 1}).
std::vector<int> split_n(int n, int max_n);

}  // namespace kernelllm
