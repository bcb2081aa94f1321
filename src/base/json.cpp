// Typed JSON access; the only place that catches nlohmann's exceptions.
#include "kernelllm/base/json.h"

#include <string>
#include <utility>

namespace kernelllm {
namespace {

Status wrong_type(std::string_view what, std::string_view key, std::string_view expected, const Json& found) {
  return error(ErrorCode::parse_error, std::string(what) + ": expected " + std::string(expected) + " for \"" +
                                           std::string(key) + "\", found " + std::string(json_type_name(found)));
}

Status missing(std::string_view what, std::string_view key) {
  return error(ErrorCode::not_found, std::string(what) + ": missing required field \"" + std::string(key) + "\"");
}

const Json* member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class T, class Pred, class Get>
Result<std::optional<T>> get_opt(const Json& obj, std::string_view key, std::string_view what,
                                 std::string_view expected, Pred is_type, Get get) {
  const Json* m = member(obj, key);
  if (m == nullptr) return std::optional<T>();
  if (!is_type(*m)) return wrong_type(what, key, expected, *m);
  return std::optional<T>(get(*m));
}

template <class T>
Result<T> require(Result<std::optional<T>> r, std::string_view what, std::string_view key) {
  if (!r.ok()) return r.status();
  if (!r->has_value()) return missing(what, key);
  return **r;
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return error(ErrorCode::parse_error, std::string(what) + ": invalid JSON at byte " + std::to_string(e.byte) +
                                             ": " + e.what());
  } catch (const std::exception& e) {
    return error(ErrorCode::parse_error, std::string(what) + ": invalid JSON: " + e.what());
  }
}

std::string_view json_type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::binary: return "binary";
    case Json::value_t::discarded: return "invalid";
  }
  return "unknown";
}

Result<std::optional<int64_t>> json_opt_int(const Json& obj, std::string_view key, std::string_view what) {
  return get_opt<int64_t>(
      obj, key, what, "integer", [](const Json& j) { return j.is_number_integer(); },
      [](const Json& j) { return j.get<int64_t>(); });
}
Result<std::optional<double>> json_opt_number(const Json& obj, std::string_view key, std::string_view what) {
  return get_opt<double>(
      obj, key, what, "number", [](const Json& j) { return j.is_number(); },
      [](const Json& j) { return j.get<double>(); });
}
Result<std::optional<std::string>> json_opt_string(const Json& obj, std::string_view key, std::string_view what) {
  return get_opt<std::string>(
      obj, key, what, "string", [](const Json& j) { return j.is_string(); },
      [](const Json& j) { return j.get<std::string>(); });
}
Result<std::optional<bool>> json_opt_bool(const Json& obj, std::string_view key, std::string_view what) {
  return get_opt<bool>(
      obj, key, what, "boolean", [](const Json& j) { return j.is_boolean(); },
      [](const Json& j) { return j.get<bool>(); });
}

Result<int64_t> json_int(const Json& obj, std::string_view key, std::string_view what) {
  return require(json_opt_int(obj, key, what), what, key);
}
Result<double> json_number(const Json& obj, std::string_view key, std::string_view what) {
  return require(json_opt_number(obj, key, what), what, key);
}
Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view what) {
  return require(json_opt_string(obj, key, what), what, key);
}
Result<bool> json_bool(const Json& obj, std::string_view key, std::string_view what) {
  return require(json_opt_bool(obj, key, what), what, key);
}

namespace {

bool has_type(const Json& j, unsigned types) {
  return ((types & kJsonBool) && j.is_boolean()) || ((types & kJsonInteger) && j.is_number_integer()) ||
         ((types & kJsonNumber) && j.is_number()) || ((types & kJsonString) && j.is_string()) ||
         ((types & kJsonObject) && j.is_object()) || ((types & kJsonArray) && j.is_array()) ||
         ((types & kJsonNull) && j.is_null());
}

std::string type_names(unsigned types) {
  std::string out;
  const std::pair<unsigned, const char*> names[] = {{kJsonBool, "a boolean"}, {kJsonInteger, "an integer"},
                                                    {kJsonNumber, "a number"},  {kJsonString, "a string"},
                                                    {kJsonObject, "an object"}, {kJsonArray, "an array"},
                                                    {kJsonNull, "null"}};
  for (auto [bit, name] : names) {
    if (!(types & bit)) continue;
    if (!out.empty()) out += " or ";
    out += name;
  }
  return out;
}

}  // namespace

std::string json_members_error(const Json& obj, std::span<const JsonMember> members, std::string_view where) {
  if (!obj.is_object()) return std::string(where) + "expected an object, found " + std::string(json_type_name(obj));
  for (const JsonMember& m : members) {
    auto it = obj.find(m.key);
    if (it == obj.end()) continue;
    if (!has_type(*it, m.types)) {
      return std::string(where) + "member '" + m.key + "': expected " + type_names(m.types) + ", found " +
             std::string(json_type_name(*it));
    }
    if (m.element_types == 0 || !it->is_array()) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      if (!has_type((*it)[i], m.element_types)) {
        return std::string(where) + "member '" + m.key + "'[" + std::to_string(i) + "]: expected " +
               type_names(m.element_types) + ", found " + std::string(json_type_name((*it)[i]));
      }
    }
  }
  return "";
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t k = 0; k < bytes.size(); k += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])) << 16;
    if (k + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[k + 1])) << 8;
    if (k + 2 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[k + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += k + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += k + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace kernelllm
