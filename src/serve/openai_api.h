// The OpenAI wire format for /v1/completions and /v1/chat/completions: request parsing and
// validation (limits, the model's context, unsupported options) into an engine request, and
// the response, stream-chunk and error bodies. No HTTP here (server.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/json.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/engine/tokenizer.h"
#include "kernelllm/serve/chat_template.h"

namespace kernelllm::serve {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty → null
  std::string code;   // empty → null
  Json to_json() const;
};

struct ApiLimits {
  int max_n = 16;
  int max_tokens = 4096;
  int64_t context = 0;  // the model's max_position_embeddings
};

// What the parser needs from the server.
struct ApiContext {
  const Tokenizer* tokenizer = nullptr;
  const Result<ChatTemplate>* chat = nullptr;  // the model's chat format, or why there is none
  std::string model_name;
  ApiLimits limits;
};

struct EngineRequest {
  bool chat = false;
  std::vector<int32_t> prompt_ids;
  int n = 1;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses and validates a request body; `out` is filled when no error is returned.
std::optional<ApiError> parse_request(std::string_view body, bool chat, const ApiContext& ctx, EngineRequest& out);

struct Choice {
  std::string text;
  std::string finish_reason;  // stop | length
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  Json to_json() const;
};

// The whole response of a non-streamed request.
Json response_body(bool chat, const std::string& id, int64_t created, const std::string& model,
                   const std::vector<Choice>& choices, const Usage& usage);
// One stream chunk: text for choice `index` (chat: a delta, with the role on the first), or its
// finish reason when `finish_reason` is set.
Json chunk_body(bool chat, const std::string& id, int64_t created, const std::string& model, int index,
                std::string_view text, const std::string* finish_reason, bool first);
// The final usage chunk (stream_options.include_usage): no choices.
Json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& usage);

}  // namespace kernelllm::serve
