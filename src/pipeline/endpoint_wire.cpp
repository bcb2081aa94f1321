// The OpenAI-compatible wire format as pure functions: URL and options checks, request bodies,
// response and error parsing, retry decisions and delays, n splitting. No I/O here
// (endpoint_source.cpp does the HTTP); see https://platform.openai.com/docs/api-reference/completions.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "kernelllm/pipeline/endpoint.h"

namespace kernelllm {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string cut(std::string_view s, size_t max_bytes) {
  std::string out(s.substr(0, std::min(s.size(), max_bytes)));
  if (s.size() > max_bytes) out += "...";
  return out;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

}  // namespace

Result<EndpointPrompt> parse_endpoint_prompt(std::string_view name) {
  if (name == "kernelllm") return EndpointPrompt::kernelllm;
  if (name == "chat") return EndpointPrompt::chat;
  return error(ErrorCode::invalid_argument, fmt::format("endpoint prompt: expected kernelllm or chat, found \"{}\"", name));
}

std::string_view endpoint_prompt_name(EndpointPrompt form) { return form == EndpointPrompt::chat ? "chat" : "kernelllm"; }

Result<PromptTemplate> endpoint_prompt_template(EndpointPrompt form, const std::filesystem::path& override_file) {
  if (form == EndpointPrompt::chat && override_file.empty()) {
    return PromptTemplate{std::string(builtin_chat_prompt_template()), "built-in chat"};
  }
  return load_prompt_template({}, override_file);
}

Result<EndpointUrl> parse_endpoint_url(std::string_view base_url) {
  auto bad = [&](std::string_view why) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("--endpoint: expected an OpenAI-compatible base URL such as http://127.0.0.1:8000/v1, found "
                             "\"{}\" ({})",
                             base_url, why));
  };
  size_t scheme_end = base_url.find("://");
  if (scheme_end == std::string_view::npos) return bad("no http:// or https://");
  std::string_view scheme = base_url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return bad(fmt::format("scheme {} is not http or https", scheme));
  std::string_view rest = base_url.substr(scheme_end + 3);
  size_t slash = rest.find('/');
  std::string_view host = rest.substr(0, slash);
  if (host.empty()) return bad("no host");
  if (host.find_first_of("?#@ ") != std::string_view::npos) return bad("the host part holds ?, #, @ or a space");
  std::string path(slash == std::string_view::npos ? std::string_view() : rest.substr(slash));
  if (path.find_first_of("?# ") != std::string::npos) return bad("the path holds ?, # or a space");
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (ends_with(path, "/completions") || ends_with(path, "/models")) {
    return bad("that names an endpoint; give the base URL it sits under");
  }
  return EndpointUrl{std::string(scheme) + "://" + std::string(host), path};
}

Status validate(const EndpointOptions& o) {
  KLLM_RETURN_IF_ERROR(parse_endpoint_url(o.base_url).status());
  auto bad = [](std::string what) { return error(ErrorCode::invalid_argument, std::move(what)); };
  if (o.max_n < 1) return bad(fmt::format("--endpoint-max-n: expected at least 1, found {}", o.max_n));
  if (o.parallel < 1) return bad(fmt::format("--endpoint-parallel: expected at least 1, found {}", o.parallel));
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s)) {
    return bad(fmt::format("--endpoint-timeout: expected seconds > 0, found {}", o.timeout_s));
  }
  if (o.retries < 0) return bad(fmt::format("--endpoint-retries: expected at least 0, found {}", o.retries));
  if (!(o.backoff_s >= 0)) return bad(fmt::format("endpoint backoff: expected seconds >= 0, found {}", o.backoff_s));
  return {};
}

Json endpoint_facts(const EndpointOptions& o) {
  return Json{{"url", o.base_url}, {"model", o.model}, {"prompt", std::string(endpoint_prompt_name(o.prompt))}};
}

Json endpoint_request_body(const EndpointOptions& o, const std::string& prompt, int n, int max_new_tokens,
                           const SamplingParams& sampling, int sample_offset) {
  Json body{{"model", o.model},
            {"n", n},
            {"max_tokens", max_new_tokens},
            {"temperature", sampling.temperature},
            {"stream", false},
            {"seed", sampling.seed + static_cast<uint64_t>(sample_offset)}};
  // top_k is an extension (vLLM, SGLang, llama.cpp) that OpenAI's API refuses: sent only when set.
  body["top_p"] = sampling.top_p;
  if (sampling.top_k > 0) body["top_k"] = sampling.top_k;
  if (o.prompt == EndpointPrompt::chat) {
    body["messages"] = Json::array({Json{{"role", "user"}, {"content", prompt}}});
  } else {
    body["prompt"] = prompt;
  }
  return body;
}

Result<EndpointChoices> parse_endpoint_response(std::string_view body, EndpointPrompt form) {
  const std::string what = form == EndpointPrompt::chat ? "chat completion response" : "completion response";
  KLLM_ASSIGN_OR_RETURN(Json j, parse_json(body, what));
  if (!j.is_object()) return error(ErrorCode::parse_error, what + ": expected a JSON object, found " + std::string(json_type_name(j)));
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) {
    return error(ErrorCode::parse_error, what + ": expected a non-empty \"choices\" array, found " +
                                             (choices == j.end() ? std::string("none") : cut(choices->dump(), 200)));
  }
  std::map<int64_t, std::pair<std::string, std::string>> by_index;
  for (size_t i = 0; i < choices->size(); ++i) {
    const Json& c = (*choices)[i];
    const std::string where = fmt::format("{}: choices[{}]", what, i);
    if (!c.is_object()) return error(ErrorCode::parse_error, where + ": expected an object, found " + std::string(json_type_name(c)));
    KLLM_ASSIGN_OR_RETURN(std::optional<int64_t> index, json_opt_int(c, "index", where));
    std::string text;
    if (form == EndpointPrompt::chat) {
      auto message = c.find("message");
      if (message == c.end() || !message->is_object()) return error(ErrorCode::parse_error, where + ": expected a \"message\" object");
      auto content = message->find("content");
      if (content != message->end() && !content->is_null()) {
        if (!content->is_string()) return error(ErrorCode::parse_error, where + ": expected message.content to be a string");
        text = content->get<std::string>();
      }
    } else {
      KLLM_ASSIGN_OR_RETURN(text, json_string(c, "text", where));
    }
    std::string finish;
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) finish = f->get<std::string>();
    const int64_t key = index.value_or(static_cast<int64_t>(i));
    if (!by_index.emplace(key, std::make_pair(std::move(text), std::move(finish))).second) {
      return error(ErrorCode::parse_error, fmt::format("{}: choice index {} appears twice", what, key));
    }
  }
  EndpointChoices out;
  for (auto& [index, entry] : by_index) {
    out.texts.push_back(std::move(entry.first));
    out.finish_reasons.push_back(std::move(entry.second));
  }
  if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    if (auto p = usage->find("prompt_tokens"); p != usage->end() && p->is_number_integer()) out.prompt_tokens = p->get<int64_t>();
    if (auto c = usage->find("completion_tokens"); c != usage->end() && c->is_number_integer()) {
      out.completion_tokens = c->get<int64_t>();
    }
  }
  return out;
}

std::string endpoint_error_message(std::string_view body) {
  auto j = parse_json(body, "error body");
  if (j.ok() && j->is_object()) {
    const Json& e = *j;
    if (auto err = e.find("error"); err != e.end()) {
      if (err->is_string()) return cut(err->get<std::string>(), 300);
      if (err->is_object()) {
        if (auto m = err->find("message"); m != err->end() && m->is_string()) return cut(m->get<std::string>(), 300);
      }
    }
    for (const char* key : {"message", "detail"}) {
      if (auto m = e.find(key); m != e.end()) return cut(m->is_string() ? m->get<std::string>() : m->dump(), 300);
    }
  }
  std::string text = cut(body, 300);
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text.empty() ? "(empty body)" : text;
}

bool endpoint_status_retryable(int status) { return status == 408 || status == 409 || status == 429 || status >= 500; }

std::optional<int> endpoint_smaller_n(std::string_view message, int asked) {
  if (asked <= 1) return std::nullopt;
  std::string lower(message);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool names_n = lower.find("choice") != std::string::npos;
  for (size_t i = 0; !names_n && i < lower.size(); ++i) {
    names_n = lower[i] == 'n' && (i == 0 || !is_word_char(lower[i - 1])) && (i + 1 == lower.size() || !is_word_char(lower[i + 1]));
  }
  if (!names_n) return std::nullopt;
  int best = 0;
  for (size_t i = 0; i < lower.size();) {
    if (!std::isdigit(static_cast<unsigned char>(lower[i]))) {
      ++i;
      continue;
    }
    int value = 0;
    auto [end, ec] = std::from_chars(lower.data() + i, lower.data() + lower.size(), value);
    if (ec == std::errc() && value >= 1 && value < asked) best = std::max(best, value);
    i = static_cast<size_t>(end - lower.data());
    while (i < lower.size() && std::isdigit(static_cast<unsigned char>(lower[i]))) ++i;
  }
  return best > 0 ? best : std::max(1, asked / 2);
}

std::optional<double> endpoint_retry_after(std::string_view retry_after, std::string_view retry_after_ms) {
  auto number = [](std::string_view s) -> std::optional<double> {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    if (s.empty()) return std::nullopt;
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !(v >= 0) || !std::isfinite(v)) return std::nullopt;
    return v;
  };
  if (auto ms = number(retry_after_ms)) return *ms / 1000.0;
  return number(retry_after);
}

double endpoint_retry_delay_s(const EndpointOptions& o, int retry, std::optional<double> retry_after_s, double unit) {
  if (retry_after_s) return std::min(*retry_after_s, kMaxBackoffS);
  const double base = std::min(kMaxBackoffS, o.backoff_s * std::pow(2.0, std::min(retry, 30)));
  return base * (0.5 + 0.5 * std::clamp(unit, 0.0, 1.0));
}

std::vector<int> split_n(int n, int max_n) {
  std::vector<int> out;
  const int step = std::max(1, max_n);
  for (int left = n; left > 0; left -= step) out.push_back(std::min(left, step));
  return out;
}

}  // namespace kernelllm
