// Recognizes a Llama-3 / Llama-3.1 chat template and renders it (see chat_template.h). The
// rendering follows Meta's Llama-3 prompt format: each message is a role header, its content
// with surrounding whitespace trimmed (the templates' `| trim`), and <|eot_id|>.
#include "kernelllm/serve/chat_template.h"

#include <string_view>

#include "kernelllm/base/file.h"
#include "kernelllm/base/json.h"

namespace kernelllm::serve {
namespace {

std::string trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string header(std::string_view role) {
  return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out = bos_token;
  size_t first = 0;
  if (format == ChatFormat::llama31) {
    // Llama-3.1 always opens with a system header holding the dates; a leading system message
    // goes after them.
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = trim(messages[0].content);
      first = 1;
    }
    out += header("system") + "Cutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n" + system +
           "<|eot_id|>";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    out += header(messages[i].role) + trim(messages[i].content) + "<|eot_id|>";
  }
  return out + header("assistant");
}

Result<ChatTemplate> recognize_chat_template(const std::string& jinja, const std::string& bos_token) {
  for (const char* token : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
    if (jinja.find(token) == std::string::npos) {
      return error(ErrorCode::unsupported, std::string("chat_template: expected the Llama-3 chat format (") + token +
                                               " in the template), found a template without it; only Llama-3 "
                                               "chat templates are supported");
    }
  }
  ChatTemplate t;
  if (!bos_token.empty()) t.bos_token = bos_token;
  if (jinja.find("Cutting Knowledge Date") != std::string::npos) {
    t.format = ChatFormat::llama31;
    // `set date_string = "26 Jul 2024"` in Meta's template; keep the default when absent.
    const std::string key = "date_string = \"";
    if (size_t at = jinja.find(key); at != std::string::npos) {
      const size_t end = jinja.find('"', at + key.size());
      if (end != std::string::npos && end - at - key.size() < 40) t.date_string = jinja.substr(at + key.size(), end - at - key.size());
    }
  }
  return t;
}

Result<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "tokenizer_config.json";
  KLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  KLLM_ASSIGN_OR_RETURN(Json config, parse_json(text, path.string()));
  if (!config.is_object() || !config.contains("chat_template")) {
    return error(ErrorCode::not_found, path.string() + ": expected a chat_template, found none");
  }
  const Json& tmpl = config["chat_template"];
  std::string jinja;
  if (tmpl.is_string()) {
    jinja = tmpl.get<std::string>();
  } else if (tmpl.is_array()) {
    // The list form [{"name": "default", "template": "..."}, ...]: the default one.
    for (const Json& t : tmpl) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        jinja = t["template"].get<std::string>();
      }
    }
  }
  if (jinja.empty()) {
    return error(ErrorCode::parse_error, path.string() + ": chat_template: expected a string (or a list holding a "
                                                         "\"default\" template), found " +
                                             std::string(json_type_name(tmpl)));
  }
  std::string bos;
  if (config.contains("bos_token")) {
    const Json& b = config["bos_token"];
    if (b.is_string()) bos = b.get<std::string>();
    if (b.is_object() && b.contains("content") && b["content"].is_string()) bos = b["content"].get<std::string>();
  }
  auto t = recognize_chat_template(jinja, bos);
  if (!t.ok()) return t.status().with_context(path.string());
  return t;
}

}  // namespace kernelllm::serve
