// Typed, non-throwing access to JSON (nlohmann::json) for untrusted files:
// every getter says which file and key it wanted, what type it expected and what it found.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

// Standard base64 (RFC 4648, with padding): bytes that may not be UTF-8 (a source file) in a
// JSON string.
std::string base64_encode(std::string_view bytes);

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

// Type sets for json_members_error (bitwise or).
enum JsonTypes : unsigned {
  kJsonBool = 1,
  kJsonInteger = 2,
  kJsonNumber = 4,  // integers included
  kJsonString = 8,
  kJsonObject = 16,
  kJsonArray = 32,
  kJsonNull = 64,
};
struct JsonMember {
  const char* key;
  unsigned types;
  unsigned element_types = 0;  // arrays: each element's types (0: any)
};
// Checks many optional members at once, for messages from untrusted processes and entries of our
// own stores that may be stale: the first member present with a type outside its set (or an array
// element outside `element_types`), as "<where>member 'k': expected a number, found string";
// empty when everything present fits. Missing members are not errors.
std::string json_members_error(const Json& obj, std::span<const JsonMember> members, std::string_view where = "");

}  // namespace kernelllm
