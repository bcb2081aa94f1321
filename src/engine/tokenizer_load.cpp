// Reads an HF tokenizer.json into TokenizerData. Accepts the Llama-3 configuration (BPE with
// byte-level pre-tokenizer and decoder, optional ignore_merges, Split regex, TemplateProcessing)
// and rejects anything whose behaviour we would only approximate, saying what it found.
#include <fmt/format.h>

#include "engine/tokenizer_internal.h"
#include "kernelllm/base/json.h"

namespace kernelllm::tok {
namespace {

constexpr std::string_view kWhat = "tokenizer.json";

Status unsupported(std::string message) { return error(ErrorCode::unsupported, "tokenizer.json: " + message); }
Status malformed(std::string message) { return error(ErrorCode::parse_error, "tokenizer.json: " + message); }

bool null_or_missing(const Json& obj, const char* key) { return !obj.contains(key) || obj[key].is_null(); }

// Type of a component ("BPE", "Split", ...), or a parse error.
Result<std::string> component_type(const Json& j, std::string_view where) {
  if (!j.is_object()) {
    return malformed(fmt::format("{}: expected an object, found {}", where, json_type_name(j)));
  }
  auto type = json_string(j, "type", kWhat);
  if (!type.ok()) return type.status().with_context(where);
  return *type;
}

Status check_flag(const Json& j, const char* key, bool expected, std::string_view where) {
  auto value = json_opt_bool(j, key, kWhat);
  if (!value.ok()) return value.status().with_context(where);
  if (value->has_value() && **value != expected) {
    return unsupported(fmt::format("{}: {}={} (only {} is implemented)", where, key, **value, expected));
  }
  return {};
}

Status load_pre_tokenizer(const Json& root, TokenizerData& out) {
  if (null_or_missing(root, "pre_tokenizer")) {
    return unsupported("pre_tokenizer is missing; expected Sequence[Split(regex), ByteLevel(use_regex=false)]");
  }
  const Json& pre = root["pre_tokenizer"];
  KLLM_ASSIGN_OR_RETURN(std::string type, component_type(pre, "pre_tokenizer"));
  if (type != "Sequence" || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array() ||
      pre["pretokenizers"].size() != 2) {
    return unsupported(fmt::format(
        "pre_tokenizer: expected Sequence[Split(regex), ByteLevel(use_regex=false)], found {}", pre.dump().substr(0, 200)));
  }
  const Json& split = pre["pretokenizers"][0];
  const Json& bytelevel = pre["pretokenizers"][1];
  KLLM_ASSIGN_OR_RETURN(std::string split_type, component_type(split, "pre_tokenizer[0]"));
  KLLM_ASSIGN_OR_RETURN(std::string bl_type, component_type(bytelevel, "pre_tokenizer[1]"));
  if (split_type != "Split" || bl_type != "ByteLevel") {
    return unsupported(fmt::format("pre_tokenizer: expected Sequence[Split, ByteLevel], found Sequence[{}, {}]",
                                   split_type, bl_type));
  }
  auto behavior = json_string(split, "behavior", kWhat);
  if (!behavior.ok()) return behavior.status().with_context("pre_tokenizer Split");
  if (*behavior != "Isolated") {
    return unsupported(fmt::format("pre_tokenizer Split: behavior {} (only Isolated is implemented)", *behavior));
  }
  KLLM_RETURN_IF_ERROR(check_flag(split, "invert", false, "pre_tokenizer Split"));
  if (!split.contains("pattern") || !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string()) {
    return unsupported("pre_tokenizer Split: expected pattern {\"Regex\": string}");
  }
  KLLM_RETURN_IF_ERROR(check_flag(bytelevel, "add_prefix_space", false, "pre_tokenizer ByteLevel"));
  KLLM_RETURN_IF_ERROR(check_flag(bytelevel, "use_regex", false, "pre_tokenizer ByteLevel"));
  auto splitter = RegexSplitter::compile(split["pattern"]["Regex"].get<std::string>());
  if (!splitter.ok()) return splitter.status();
  out.splitter.emplace(std::move(splitter).value());
  return {};
}

Status load_model(TokenizerJson& parsed, TokenizerData& out) {
  const Json& root = parsed.root;
  if (null_or_missing(root, "model")) return malformed("expected a \"model\" object, found none");
  const Json& model = root["model"];
  KLLM_ASSIGN_OR_RETURN(std::string type, component_type(model, "model"));
  if (type != "BPE") return unsupported(fmt::format("model.type {} (only BPE is implemented)", type));
  if (!null_or_missing(model, "dropout") && !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return unsupported("model.dropout must be null (BPE dropout is random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!null_or_missing(model, key) && !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return unsupported(fmt::format("model.{} must be null for a byte-level BPE, found {}", key, model[key].dump()));
    }
  }
  KLLM_RETURN_IF_ERROR(check_flag(model, "byte_fallback", false, "model"));
  auto ignore_merges = json_opt_bool(model, "ignore_merges", kWhat);
  if (!ignore_merges.ok()) return ignore_merges.status();

  if (!parsed.vocab) return malformed("model.vocab: expected an object of token -> id");
  Bpe::Vocab vocab;
  vocab.reserve(parsed.vocab->size());
  for (auto& [token, id] : *parsed.vocab) {
    if (id < 0 || id >= (int64_t{1} << 30)) {
      return malformed(fmt::format("model.vocab[{}]: expected an id in 0..2^30, found {}", token, id));
    }
    if (!vocab.emplace(std::move(token), static_cast<int32_t>(id)).second) {
      return malformed("model.vocab: a token appears twice");
    }
  }
  parsed.vocab.reset();
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) max_id = std::max(max_id, id);
  out.vocab_size = max_id + 1;
  out.bytes.assign(static_cast<size_t>(out.vocab_size), {});
  out.kind.assign(static_cast<size_t>(out.vocab_size), TokenKind::none);
  const ByteLevel& bl = byte_level();
  for (const auto& [token, id] : vocab) {
    if (out.kind[static_cast<size_t>(id)] != TokenKind::none) {
      return malformed(fmt::format("model.vocab: id {} is used by more than one token", id));
    }
    out.kind[static_cast<size_t>(id)] = TokenKind::model;
    out.bytes[static_cast<size_t>(id)] = bl.decode_token(token);
  }
  int missing_bytes = 0;
  for (const std::string& b : bl.byte_to_utf8) missing_bytes += vocab.contains(b) ? 0 : 1;
  if (!null_or_missing(model, "unk_token") && missing_bytes > 0) {
    return unsupported(fmt::format("model.unk_token is set and {} of 256 byte tokens are missing", missing_bytes));
  }

  if (!parsed.merges) return malformed("model.merges: expected an array");
  std::vector<std::pair<int32_t, int32_t>> pairs;
  std::vector<int32_t> merged;
  pairs.reserve(parsed.merges->size());
  merged.reserve(parsed.merges->size());
  std::string joined;
  for (size_t r = 0; r < parsed.merges->size(); ++r) {
    const auto& [a, b] = (*parsed.merges)[r];
    joined.assign(a);
    joined.append(b);
    const auto ia = vocab.find(a), ib = vocab.find(b), ij = vocab.find(joined);
    if (ia == vocab.end() || ib == vocab.end() || ij == vocab.end()) {
      const std::string& missing = ia == vocab.end() ? a : ib == vocab.end() ? b : joined;
      return malformed(fmt::format("model.merges[{}]: token \"{}\" is not in the vocab", r, missing));
    }
    pairs.emplace_back(ia->second, ib->second);
    merged.push_back(ij->second);
  }
  out.bpe = std::make_unique<Bpe>(std::move(vocab), pairs, merged, ignore_merges->value_or(false));
  return {};
}

Status load_added_tokens(const Json& root, TokenizerData& out) {
  if (null_or_missing(root, "added_tokens")) return {};
  if (!root["added_tokens"].is_array()) return malformed("added_tokens: expected an array");
  std::vector<std::tuple<std::string, int32_t, bool, bool>> tokens;  // content, id, special, normalized
  for (const Json& t : root["added_tokens"]) {
    if (!t.is_object()) return malformed("added_tokens: expected objects");
    auto id = json_int(t, "id", kWhat);
    auto content = json_string(t, "content", kWhat);
    if (!id.ok()) return id.status().with_context("added_tokens");
    if (!content.ok()) return content.status().with_context("added_tokens");
    if (*id < 0 || *id >= (int64_t{1} << 30) || content->empty()) {
      return malformed(fmt::format("added token \"{}\": expected non-empty content and id in 0..2^30, found id {}",
                                   *content, *id));
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      KLLM_RETURN_IF_ERROR(check_flag(t, flag, false, fmt::format("added token \"{}\"", *content)));
    }
    auto special = json_opt_bool(t, "special", kWhat);
    auto normalized = json_opt_bool(t, "normalized", kWhat);
    if (!special.ok()) return special.status();
    if (!normalized.ok()) return normalized.status();
    // tokenizers' AddedToken defaults: special false, normalized = !special.
    const bool is_special = special->value_or(false);
    tokens.emplace_back(*content, static_cast<int32_t>(*id), is_special, normalized->value_or(!is_special));
  }
  for (const auto& [content, id, special, normalized] : tokens) {
    if (id >= out.vocab_size) {
      out.vocab_size = id + 1;
      out.bytes.resize(static_cast<size_t>(out.vocab_size));
      out.kind.resize(static_cast<size_t>(out.vocab_size), TokenKind::none);
    }
    const auto vocab_it = out.bpe->vocab().find(content);
    if (vocab_it != out.bpe->vocab().end() && vocab_it->second != id) {
      return unsupported(fmt::format("added token \"{}\" has id {} but the model vocab gives it id {}", content, id,
                                     vocab_it->second));
    }
    if (out.added_ids.contains(content) ||
        (vocab_it == out.bpe->vocab().end() && out.kind[static_cast<size_t>(id)] != TokenKind::none)) {
      return malformed(fmt::format("added token \"{}\" (id {}) repeats a token or an id", content, id));
    }
    out.added_ids.emplace(content, id);
    out.kind[static_cast<size_t>(id)] = special ? TokenKind::special : TokenKind::added;
    out.bytes[static_cast<size_t>(id)] = byte_level().decode_token(content);
    (normalized ? out.normalized_added : out.raw_added).add(content, id);
  }
  return {};
}

Result<std::vector<int32_t>> special_token_ids(const Json& tp, const std::string& name) {
  if (!tp.contains("special_tokens") || !tp["special_tokens"].contains(name) ||
      !tp["special_tokens"][name].is_object() || !tp["special_tokens"][name].contains("ids")) {
    return malformed(fmt::format("post_processor: special token {} is not in special_tokens", name));
  }
  const Json& ids = tp["special_tokens"][name]["ids"];
  if (!ids.is_array()) return malformed(fmt::format("post_processor: special_tokens[{}].ids: expected an array", name));
  std::vector<int32_t> out;
  for (const Json& id : ids) {
    if (!id.is_number_integer()) return malformed(fmt::format("post_processor: special_tokens[{}].ids", name));
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

Status load_template(const Json& tp, TokenizerData& out) {
  if (!tp.contains("single") || !tp["single"].is_array()) {
    return malformed("post_processor TemplateProcessing: expected a \"single\" array");
  }
  bool seen_sequence = false;
  for (const Json& piece : tp["single"]) {
    if (piece.contains("Sequence")) {
      const Json& seq = piece["Sequence"];
      if (seen_sequence || !seq.is_object() || !seq.contains("id") || seq["id"] != "A") {
        return unsupported("post_processor TemplateProcessing: single must hold sequence A exactly once");
      }
      seen_sequence = true;
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].contains("id") &&
               piece["SpecialToken"]["id"].is_string()) {
      KLLM_ASSIGN_OR_RETURN(auto ids, special_token_ids(tp, piece["SpecialToken"]["id"].get<std::string>()));
      auto& dst = seen_sequence ? out.suffix_ids : out.prefix_ids;
      dst.insert(dst.end(), ids.begin(), ids.end());
    } else {
      return malformed(fmt::format("post_processor TemplateProcessing: unexpected piece {}", piece.dump()));
    }
  }
  if (!seen_sequence) return unsupported("post_processor TemplateProcessing: single has no sequence A");
  return {};
}

Status load_post_processor(const Json& root, TokenizerData& out) {
  if (null_or_missing(root, "post_processor")) return {};
  const Json& pp = root["post_processor"];
  KLLM_ASSIGN_OR_RETURN(std::string type, component_type(pp, "post_processor"));
  if (type == "TemplateProcessing") return load_template(pp, out);
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    int templates = 0;
    for (const Json& p : pp["processors"]) {
      KLLM_ASSIGN_OR_RETURN(std::string t, component_type(p, "post_processor.processors[]"));
      if (t == "TemplateProcessing") {
        KLLM_RETURN_IF_ERROR(load_template(p, out));
        ++templates;
      } else if (t != "ByteLevel") {  // ByteLevel post-processing only adjusts offsets
        return unsupported(fmt::format("post_processor: {} (only ByteLevel and TemplateProcessing)", t));
      }
    }
    if (templates <= 1) return {};
  }
  return unsupported(fmt::format("post_processor: {} is not ByteLevel + one TemplateProcessing", pp.dump().substr(0, 200)));
}

}  // namespace

Status load_tokenizer(std::string_view json_text, TokenizerData& out) {
  KLLM_ASSIGN_OR_RETURN(TokenizerJson parsed, read_tokenizer_json(json_text));
  const Json& root = parsed.root;
  if (!root.is_object()) return malformed(fmt::format("expected a JSON object, found {}", json_type_name(root)));
  if (!null_or_missing(root, "normalizer")) {
    return unsupported(fmt::format("normalizer {} (only null is implemented)", root["normalizer"].dump().substr(0, 200)));
  }
  KLLM_RETURN_IF_ERROR(load_model(parsed, out));
  KLLM_RETURN_IF_ERROR(load_pre_tokenizer(root, out));
  KLLM_RETURN_IF_ERROR(load_added_tokens(root, out));
  KLLM_RETURN_IF_ERROR(load_post_processor(root, out));
  if (null_or_missing(root, "decoder")) return unsupported("decoder is missing; expected ByteLevel");
  KLLM_ASSIGN_OR_RETURN(std::string decoder, component_type(root["decoder"], "decoder"));
  if (decoder != "ByteLevel") return unsupported(fmt::format("decoder {} (only ByteLevel is implemented)", decoder));
  for (const auto* ids : {&out.prefix_ids, &out.suffix_ids}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= out.vocab_size || out.kind[static_cast<size_t>(id)] == TokenKind::none) {
        return malformed(fmt::format("post_processor: special token id {} is not in the vocabulary", id));
      }
    }
  }
  return {};
}

}  // namespace kernelllm::tok
