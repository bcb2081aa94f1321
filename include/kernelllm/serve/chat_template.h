// The Llama-3 chat format for /v1/chat/completions. We do not run Jinja: the model's
// tokenizer_config.json `chat_template` is recognized as Llama-3 (header and eot tokens) or
// Llama-3.1 (its default system header with the knowledge and today dates) and rendered here;
// any other template, or none, is refused with an error that says what was found.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kernelllm/base/status.h"

namespace kernelllm::serve {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool
  std::string content;  // text (content parts joined)
};

enum class ChatFormat { llama3, llama31 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::llama3;
  std::string bos_token = "<|begin_of_text|>";
  std::string date_string = "26 Jul 2024";  // llama31: the template's default "Today Date"

  // BOS, the messages, and the assistant header the model continues from. Encode the result
  // without adding special tokens (the BOS is in the text).
  std::string render(const std::vector<ChatMessage>& messages) const;
};

// Reads `model_dir`/tokenizer_config.json. Errors: no file, no chat_template, or a template that
// is not recognizably Llama-3 (unsupported, naming what is missing).
Result<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir);
// The same from a chat_template string and the config's bos token.
Result<ChatTemplate> recognize_chat_template(const std::string& jinja, const std::string& bos_token);

}  // namespace kernelllm::serve
