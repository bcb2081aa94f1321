// Typed, non-throwing access to JSON (nlohmann::json) for untrusted files:
// every getter says which file and key it wanted, what type it expected and what it found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kernelllm/base/status.h"

namespace kernelllm {

using Json = nlohmann::json;

// Parses `text`; `what` names the source in errors ("config.json"). Parse errors carry the byte offset.
Result<Json> parse_json(std::string_view text, std::string_view what);

// "string", "integer", "number", "object", ... as a reader would say it.
std::string_view json_type_name(const Json& j);

// Required members: not_found when missing, parse_error when of the wrong type.
Result<int64_t> json_int(const Json& obj, std::string_view key, std::string_view what);
Result<double> json_number(const Json& obj, std::string_view key, std::string_view what);
Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view what);
Result<bool> json_bool(const Json& obj, std::string_view key, std::string_view what);

// Optional members: nullopt when missing or null, an error only when present with the wrong type.
Result<std::optional<int64_t>> json_opt_int(const Json& obj, std::string_view key, std::string_view what);
Result<std::optional<double>> json_opt_number(const Json& obj, std::string_view key, std::string_view what);
Result<std::optional<std::string>> json_opt_string(const Json& obj, std::string_view key, std::string_view what);
Result<std::optional<bool>> json_opt_bool(const Json& obj, std::string_view key, std::string_view what);

}  // namespace kernelllm
