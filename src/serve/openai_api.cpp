// OpenAI request parsing and response bodies (see openai_api.h). Field semantics follow the
// OpenAI API reference: temperature in [0, 2] (default 1), top_p in (0, 1] (default 1), up to
// 4 stop strings, max_tokens default 16 for completions and the rest of the context for chat.
#include "serve/openai_api.h"

#include <algorithm>
#include <limits>
#include <random>

namespace kernelllm::serve {
namespace {

ApiError bad(std::string param, std::string message, std::string code = "invalid_value") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

// An optional integer member within [lo, hi]; nullopt when absent or null.
std::optional<ApiError> opt_int(const Json& body, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  out.reset();
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const Json& v = body[key];
  if (!v.is_number_integer()) {
    return bad(key, std::string("'") + key + "': expected an integer, found " + std::string(json_type_name(v)));
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    out = std::numeric_limits<int64_t>::max();
  } else {
    out = v.get<int64_t>();
  }
  if (*out < lo || *out > hi) {
    return bad(key, std::string("'") + key + "': expected an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], found " + v.dump());
  }
  return std::nullopt;
}

std::optional<ApiError> opt_number(const Json& body, const char* key, double lo, double hi, bool lo_open,
                                   std::optional<double>& out) {
  out.reset();
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const Json& v = body[key];
  if (!v.is_number()) {
    return bad(key, std::string("'") + key + "': expected a number, found " + std::string(json_type_name(v)));
  }
  out = v.get<double>();
  if ((lo_open ? *out <= lo : *out < lo) || *out > hi) {
    return bad(key, std::string("'") + key + "': expected a number in " + (lo_open ? "(" : "[") + std::to_string(lo) +
                        ", " + std::to_string(hi) + "], found " + v.dump());
  }
  return std::nullopt;
}

// Options we do not implement: refused when set to anything but their neutral value.
std::optional<ApiError> refuse_unsupported(const Json& body, bool chat) {
  const auto set = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  const auto unsupported = [](const char* key) {
    return bad(key, std::string("'") + key + "' is not supported by this server", "unsupported_parameter");
  };
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (set(key) && !(body[key].is_number() && body[key].get<double>() == 0.0)) return unsupported(key);
  }
  if (set("logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty())) return unsupported("logit_bias");
  if (set("logprobs") && body["logprobs"] != false) return unsupported("logprobs");
  if (set("top_logprobs")) return unsupported("top_logprobs");
  if (chat) {
    for (const char* key : {"tools", "functions", "tool_choice", "function_call"}) {
      if (set(key)) return unsupported(key);
    }
    if (set("response_format") && !(body["response_format"].is_object() &&
                                    body["response_format"].value("type", "") == "text")) {
      return unsupported("response_format");
    }
  } else {
    if (set("echo") && body["echo"] != false) return unsupported("echo");
    if (set("suffix")) return unsupported("suffix");
    if (set("best_of") && !(body["best_of"].is_number_integer() && body["best_of"].get<int64_t>() <= 1)) {
      return unsupported("best_of");
    }
  }
  return std::nullopt;
}

// A message's content: a string, or a list of parts of which text parts are joined.
std::optional<ApiError> message_text(const Json& content, size_t i, std::string& out) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (content.is_array()) {
    for (const Json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
        return bad("messages", where + ": expected text parts ({\"type\": \"text\", \"text\": ...}), found " + part.dump());
      }
      out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return bad("messages", where + ": expected a string or a list of text parts, found " + std::string(json_type_name(content)));
}

std::optional<ApiError> chat_prompt(const Json& body, const ApiContext& ctx, std::vector<int32_t>& ids) {
  if (!ctx.chat->ok()) {
    return ApiError{400, "this model has no usable chat template: " + ctx.chat->status().message(),
                    "invalid_request_error", "messages", "chat_template_unsupported"};
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return bad("messages", "'messages': expected a non-empty list of messages", "missing_required_parameter");
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const Json& m = body["messages"][i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return bad("messages", "messages[" + std::to_string(i) + "]: expected an object with a string 'role'");
    }
    ChatMessage msg{m["role"].get<std::string>(), {}};
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "developer") {
      return bad("messages", "messages[" + std::to_string(i) + "].role: expected system, developer, user or assistant, found \"" +
                                 msg.role + "\"");
    }
    if (msg.role == "developer") msg.role = "system";
    if (m.contains("content") && !m["content"].is_null()) {
      if (auto e = message_text(m["content"], i, msg.content)) return e;
    }
    messages.push_back(std::move(msg));
  }
  auto encoded = ctx.tokenizer->encode((*ctx.chat)->render(messages), /*add_special_tokens=*/false);
  if (!encoded.ok()) return bad("messages", "messages: " + encoded.status().message());
  ids = std::move(*encoded);
  return std::nullopt;
}

std::optional<ApiError> completion_prompt(const Json& body, const ApiContext& ctx, std::vector<int32_t>& ids) {
  if (!body.contains("prompt")) return bad("prompt", "'prompt': expected a string, found nothing", "missing_required_parameter");
  const Json& p = body["prompt"];
  const Json* text = &p;
  if (p.is_array() && p.size() == 1 && p[0].is_string()) text = &p[0];
  if (text->is_string()) {
    auto encoded = ctx.tokenizer->encode(text->get<std::string>(), /*add_special_tokens=*/true);
    if (!encoded.ok()) return bad("prompt", "prompt: " + encoded.status().message());
    ids = std::move(*encoded);
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    for (const Json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.tokenizer->vocab_size()) {
        return bad("prompt", "prompt: expected token ids in [0, " + std::to_string(ctx.tokenizer->vocab_size()) +
                                 "), found " + t.dump());
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    return bad("prompt", "'prompt': expected a string, a list of one string or a list of token ids, found " +
                             (p.is_array() ? "a list of " + std::to_string(p.size()) + " prompts (send one per request)"
                                           : std::string(json_type_name(p))));
  }
  if (ids.empty()) return bad("prompt", "'prompt': expected at least one token, found an empty prompt");
  return std::nullopt;
}

Json choice_json(bool chat, int index, const Json& payload, const Json& finish) {
  Json c = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}};
  c[chat ? "message" : "text"] = payload;
  return c;
}

}  // namespace

Json ApiError::to_json() const {
  return Json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

Json Usage::to_json() const {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

std::optional<ApiError> parse_request(std::string_view body_text, bool chat, const ApiContext& ctx, EngineRequest& out) {
  const Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return ApiError{400, "could not parse the JSON body of the request (expected a JSON object)", "invalid_request_error", "",
                    "invalid_json"};
  }
  if (!body.is_object()) return ApiError{400, "expected a JSON object as the body, found " + std::string(json_type_name(body)), "invalid_request_error", "", "invalid_json"};
  if (!body.contains("model") || !body["model"].is_string()) {
    return bad("model", "'model': expected a string naming the model, found " +
                            (body.contains("model") ? std::string(json_type_name(body["model"])) : std::string("nothing")),
               "missing_required_parameter");
  }
  if (body["model"].get<std::string>() != ctx.model_name) {
    return ApiError{404, "The model '" + body["model"].get<std::string>() + "' does not exist; this server serves '" +
                             ctx.model_name + "'",
                    "invalid_request_error", "model", "model_not_found"};
  }
  if (auto e = refuse_unsupported(body, chat)) return e;

  EngineRequest r;
  r.chat = chat;
  std::optional<int64_t> i;
  std::optional<double> d;
  if (auto e = opt_int(body, "n", 1, ctx.limits.max_n, i)) return e;
  r.n = static_cast<int>(i.value_or(1));
  const char* tokens_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e = opt_int(body, tokens_key, 1, ctx.limits.max_tokens, i)) return e;
  const std::optional<int64_t> max_tokens = i;
  if (auto e = opt_number(body, "temperature", 0.0, 2.0, false, d)) return e;
  r.sampling.temperature = static_cast<float>(d.value_or(1.0));
  if (auto e = opt_number(body, "top_p", 0.0, 1.0, true, d)) return e;
  r.sampling.top_p = static_cast<float>(d.value_or(1.0));
  if (auto e = opt_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), i)) return e;
  r.sampling.seed = i ? static_cast<uint64_t>(*i) : std::random_device{}();
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return bad("stream", "'stream': expected true or false, found " + body["stream"].dump());
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    r.include_usage = body["stream_options"].value("include_usage", false) == true;
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const Json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const Json& x) { return x.is_string(); })) {
      for (const Json& x : s) r.stop.push_back(x.get<std::string>());
    } else {
      return bad("stop", "'stop': expected a string or a list of up to 4 strings, found " + s.dump());
    }
    std::erase_if(r.stop, [](const std::string& x) { return x.empty(); });
  }

  if (auto e = chat ? chat_prompt(body, ctx, r.prompt_ids) : completion_prompt(body, ctx, r.prompt_ids)) return e;
  const auto prompt = static_cast<int64_t>(r.prompt_ids.size());
  const int64_t room = ctx.limits.context - prompt;
  const char* prompt_param = chat ? "messages" : "prompt";
  if (room < 1) {
    return ApiError{400,
                    "This model's maximum context length is " + std::to_string(ctx.limits.context) +
                        " tokens; the prompt has " + std::to_string(prompt) + " tokens, which leaves no room to generate",
                    "invalid_request_error", prompt_param, "context_length_exceeded"};
  }
  if (max_tokens && *max_tokens > room) {
    return ApiError{400,
                    "This model's maximum context length is " + std::to_string(ctx.limits.context) + " tokens; " +
                        std::to_string(prompt) + " in the prompt + " + std::to_string(*max_tokens) + " in " + tokens_key +
                        " = " + std::to_string(prompt + *max_tokens) + " tokens; reduce the prompt or " + tokens_key,
                    "invalid_request_error", tokens_key, "context_length_exceeded"};
  }
  // Defaults: 16 for completions (as OpenAI's), the rest of the context (within the limit) for chat.
  r.max_tokens = static_cast<int>(max_tokens.value_or(chat ? std::min<int64_t>(room, ctx.limits.max_tokens) : std::min<int64_t>(room, 16)));
  out = std::move(r);
  return std::nullopt;
}

Json response_body(bool chat, const std::string& id, int64_t created, const std::string& model,
                   const std::vector<Choice>& choices, const Usage& usage) {
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Json payload = chat ? Json{{"role", "assistant"}, {"content", choices[i].text}} : Json(choices[i].text);
    list.push_back(choice_json(chat, static_cast<int>(i), payload, choices[i].finish_reason));
  }
  return Json{{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", list},
              {"usage", usage.to_json()}};
}

Json chunk_body(bool chat, const std::string& id, int64_t created, const std::string& model, int index,
                std::string_view text, const std::string* finish_reason, bool first) {
  Json choice = {{"index", index}, {"logprobs", nullptr},
                 {"finish_reason", finish_reason ? Json(*finish_reason) : Json(nullptr)}};
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  return Json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({choice})}};
}

Json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model, const Usage& usage) {
  return Json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array()},
              {"usage", usage.to_json()}};
}

}  // namespace kernelllm::serve
