// config.json / generation_config.json readers for Llama-family checkpoints. Defaults follow
// transformers' LlamaConfig (5.x): absent fields take its defaults, rope parameters are read
// from either the legacy `rope_scaling` + `rope_theta` or the newer nested `rope_parameters`.
#include "kernelllm/engine/config.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "kernelllm/base/file.h"
#include "kernelllm/base/json.h"

namespace kernelllm {
namespace {

constexpr std::string_view kConfig = "config.json";
constexpr std::string_view kGenConfig = "generation_config.json";

// LlamaConfig's defaults for fields that may be absent.
constexpr int64_t kDefaultMaxPositions = 2048;
constexpr double kDefaultRmsNormEps = 1e-6;
constexpr double kDefaultRopeTheta = 10000.0;
constexpr int32_t kDefaultBos = 1;
constexpr int32_t kDefaultEos = 2;

Status bad(std::string_view what, std::string message) {
  return error(ErrorCode::parse_error, std::string(what) + ": " + message);
}

Result<int32_t> to_token_id(const Json& j, std::string_view what, std::string_view key) {
  if (!j.is_number_integer()) {
    return bad(what, "expected integer token id in \"" + std::string(key) + "\", found " +
                         std::string(json_type_name(j)));
  }
  if (j.is_number_unsigned() ? j.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                             : (j.get<int64_t>() < 0 || j.get<int64_t>() > std::numeric_limits<int32_t>::max())) {
    return bad(what, "expected token id in [0, 2^31) in \"" + std::string(key) + "\", found " + j.dump());
  }
  return static_cast<int32_t>(j.get<int64_t>());
}

// A token id field that may be absent (→ nullopt), null (→ empty), an integer or a list of integers.
Result<std::optional<std::vector<int32_t>>> token_ids(const Json& obj, std::string_view key, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::optional<std::vector<int32_t>>();
  std::vector<int32_t> ids;
  if (it->is_null()) return std::optional<std::vector<int32_t>>(ids);
  if (it->is_array()) {
    for (const Json& e : *it) {
      KLLM_ASSIGN_OR_RETURN(int32_t id, to_token_id(e, what, key));
      ids.push_back(id);
    }
    return std::optional<std::vector<int32_t>>(ids);
  }
  if (!it->is_number_integer()) {
    return bad(what, "expected integer or list of integers for \"" + std::string(key) + "\", found " +
                         std::string(json_type_name(*it)));
  }
  KLLM_ASSIGN_OR_RETURN(int32_t id, to_token_id(*it, what, key));
  ids.push_back(id);
  return std::optional<std::vector<int32_t>>(ids);
}

Result<std::optional<int32_t>> single_token_id(const Json& obj, std::string_view key, std::string_view what) {
  KLLM_ASSIGN_OR_RETURN(auto ids, token_ids(obj, key, what));
  if (!ids || ids->empty()) return std::optional<int32_t>();
  if (ids->size() != 1) {
    return bad(what, "expected one token id for \"" + std::string(key) + "\", found " +
                         std::to_string(ids->size()));
  }
  return std::optional<int32_t>(ids->front());
}

Result<int64_t> positive_int(const Json& obj, std::string_view key, std::optional<int64_t> fallback) {
  KLLM_ASSIGN_OR_RETURN(std::optional<int64_t> v, json_opt_int(obj, key, kConfig));
  if (!v) {
    if (!fallback) return error(ErrorCode::not_found, std::string(kConfig) + ": missing required field \"" +
                                                          std::string(key) + "\"");
    v = fallback;
  }
  if (*v <= 0) {
    return bad(kConfig, "expected a positive integer for \"" + std::string(key) + "\", found " + std::to_string(*v));
  }
  return *v;
}

// Checks that the checkpoint is a Llama; returns the architecture name to record.
Result<std::string> llama_architecture(const Json& root) {
  KLLM_ASSIGN_OR_RETURN(std::optional<std::string> model_type, json_opt_string(root, "model_type", kConfig));
  if (model_type && *model_type != "llama") {
    return error(ErrorCode::unsupported, std::string(kConfig) + ": unsupported model_type \"" + *model_type +
                                             "\"; only Llama (\"llama\", LlamaForCausalLM) is supported");
  }
  auto it = root.find("architectures");
  if (it != root.end() && !it->is_null()) {
    if (!it->is_array()) {
      return bad(kConfig, "expected list of strings for \"architectures\", found " + std::string(json_type_name(*it)));
    }
    std::string names;
    for (const Json& a : *it) {
      if (!a.is_string()) {
        return bad(kConfig, "expected string in \"architectures\", found " + std::string(json_type_name(a)));
      }
      if (a.get<std::string>() == "LlamaForCausalLM") return std::string("LlamaForCausalLM");
      names += (names.empty() ? "" : ", ") + a.get<std::string>();
    }
    return error(ErrorCode::unsupported, std::string(kConfig) + ": unsupported architecture [" + names +
                                             "]; only LlamaForCausalLM is supported");
  }
  if (!model_type) {
    return error(ErrorCode::unsupported,
                 std::string(kConfig) + ": neither \"architectures\" nor \"model_type\" names a Llama model");
  }
  return std::string("LlamaForCausalLM");
}

// Rope parameters as transformers 5 resolves them: a non-empty `rope_scaling` wins over
// `rope_parameters`; rope_theta comes from that dict, else the top level, else 10000.
Status parse_rope(const Json& root, ModelConfig& c) {
  const Json* rope = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return bad(kConfig, "expected object or null for \"" + std::string(key) + "\", found " +
                              std::string(json_type_name(*it)));
    }
    if (it->empty()) continue;
    rope = &*it;
    break;
  }
  KLLM_ASSIGN_OR_RETURN(std::optional<double> top_theta, json_opt_number(root, "rope_theta", kConfig));
  c.rope_theta = top_theta.value_or(kDefaultRopeTheta);
  c.rope_scaling = RopeScaling{};
  if (rope == nullptr) return Status::ok_status();

  const std::string what = std::string(kConfig) + " rope parameters";
  KLLM_ASSIGN_OR_RETURN(std::optional<double> theta, json_opt_number(*rope, "rope_theta", what));
  if (theta) c.rope_theta = *theta;
  KLLM_ASSIGN_OR_RETURN(std::optional<std::string> type, json_opt_string(*rope, "rope_type", what));
  if (!type) {
    KLLM_ASSIGN_OR_RETURN(type, json_opt_string(*rope, "type", what));
  }
  KLLM_ASSIGN_OR_RETURN(std::optional<double> partial, json_opt_number(*rope, "partial_rotary_factor", what));
  if (partial && *partial != 1.0) {
    return error(ErrorCode::unsupported, what + ": partial_rotary_factor " + std::to_string(*partial) +
                                             " is not supported (expected 1.0)");
  }
  const std::string rope_type = type.value_or("default");
  if (rope_type == "default") return Status::ok_status();
  if (rope_type != "llama3") {
    return error(ErrorCode::unsupported,
                 what + ": unsupported rope_type \"" + rope_type + "\"; supported: \"default\", \"llama3\"");
  }
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::llama3;
  KLLM_ASSIGN_OR_RETURN(s.factor, json_number(*rope, "factor", what));
  KLLM_ASSIGN_OR_RETURN(s.low_freq_factor, json_number(*rope, "low_freq_factor", what));
  KLLM_ASSIGN_OR_RETURN(s.high_freq_factor, json_number(*rope, "high_freq_factor", what));
  KLLM_ASSIGN_OR_RETURN(std::optional<int64_t> orig, json_opt_int(*rope, "original_max_position_embeddings", what));
  s.original_max_position_embeddings = orig.value_or(c.max_position_embeddings);
  if (!(s.factor > 0.0) || !(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor) ||
      s.original_max_position_embeddings <= 0) {
    return bad(what, "expected factor > 0, 0 < low_freq_factor < high_freq_factor and "
                     "original_max_position_embeddings > 0, found factor " + std::to_string(s.factor) +
                         ", low_freq_factor " + std::to_string(s.low_freq_factor) + ", high_freq_factor " +
                         std::to_string(s.high_freq_factor) + ", original_max_position_embeddings " +
                         std::to_string(s.original_max_position_embeddings));
  }
  return Status::ok_status();
}

Status require_false(const Json& root, std::string_view key, bool& out) {
  KLLM_ASSIGN_OR_RETURN(std::optional<bool> v, json_opt_bool(root, key, kConfig));
  out = v.value_or(false);
  if (out) {
    return error(ErrorCode::unsupported, std::string(kConfig) + ": expected \"" + std::string(key) +
                                             "\": false (Llama-3 has no such biases), found true");
  }
  return Status::ok_status();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_json(std::string_view text) {
  KLLM_ASSIGN_OR_RETURN(Json root, parse_json(text, kConfig));
  if (!root.is_object()) return bad(kConfig, "expected a JSON object, found " + std::string(json_type_name(root)));
  ModelConfig c;
  KLLM_ASSIGN_OR_RETURN(c.architecture, llama_architecture(root));
  KLLM_ASSIGN_OR_RETURN(c.hidden_size, positive_int(root, "hidden_size", std::nullopt));
  KLLM_ASSIGN_OR_RETURN(c.intermediate_size, positive_int(root, "intermediate_size", std::nullopt));
  KLLM_ASSIGN_OR_RETURN(c.num_hidden_layers, positive_int(root, "num_hidden_layers", std::nullopt));
  KLLM_ASSIGN_OR_RETURN(c.num_attention_heads, positive_int(root, "num_attention_heads", std::nullopt));
  KLLM_ASSIGN_OR_RETURN(c.vocab_size, positive_int(root, "vocab_size", std::nullopt));
  KLLM_ASSIGN_OR_RETURN(c.num_key_value_heads, positive_int(root, "num_key_value_heads", c.num_attention_heads));
  KLLM_ASSIGN_OR_RETURN(c.head_dim, positive_int(root, "head_dim", c.hidden_size / c.num_attention_heads));
  KLLM_ASSIGN_OR_RETURN(c.max_position_embeddings,
                        positive_int(root, "max_position_embeddings", kDefaultMaxPositions));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad(kConfig, "expected num_attention_heads (" + std::to_string(c.num_attention_heads) +
                            ") to be a multiple of num_key_value_heads, found " +
                            std::to_string(c.num_key_value_heads));
  }
  if (c.head_dim % 2 != 0) {
    return bad(kConfig, "expected an even head_dim (RoPE rotates pairs), found " + std::to_string(c.head_dim));
  }
  KLLM_ASSIGN_OR_RETURN(std::optional<double> eps, json_opt_number(root, "rms_norm_eps", kConfig));
  c.rms_norm_eps = eps.value_or(kDefaultRmsNormEps);
  if (!(c.rms_norm_eps > 0.0)) {
    return bad(kConfig, "expected rms_norm_eps > 0, found " + std::to_string(c.rms_norm_eps));
  }
  KLLM_RETURN_IF_ERROR(parse_rope(root, c));
  if (!(c.rope_theta > 0.0)) return bad(kConfig, "expected rope_theta > 0, found " + std::to_string(c.rope_theta));
  KLLM_ASSIGN_OR_RETURN(std::optional<bool> tie, json_opt_bool(root, "tie_word_embeddings", kConfig));
  c.tie_word_embeddings = tie.value_or(false);
  KLLM_RETURN_IF_ERROR(require_false(root, "attention_bias", c.attention_bias));
  KLLM_RETURN_IF_ERROR(require_false(root, "mlp_bias", c.mlp_bias));
  KLLM_ASSIGN_OR_RETURN(std::optional<std::string> act, json_opt_string(root, "hidden_act", kConfig));
  c.hidden_act = act.value_or("silu");
  if (c.hidden_act != "silu") {
    return error(ErrorCode::unsupported,
                 std::string(kConfig) + ": expected hidden_act \"silu\", found \"" + c.hidden_act + "\"");
  }
  // transformers 5 writes "dtype"; older versions "torch_dtype".
  KLLM_ASSIGN_OR_RETURN(std::optional<std::string> dtype, json_opt_string(root, "dtype", kConfig));
  if (!dtype) {
    KLLM_ASSIGN_OR_RETURN(dtype, json_opt_string(root, "torch_dtype", kConfig));
  }
  c.torch_dtype = dtype.value_or("");
  if (root.contains("bos_token_id")) {
    KLLM_ASSIGN_OR_RETURN(c.bos_token_id, single_token_id(root, "bos_token_id", kConfig));
  } else {
    c.bos_token_id = kDefaultBos;
  }
  KLLM_ASSIGN_OR_RETURN(auto eos, token_ids(root, "eos_token_id", kConfig));
  c.eos_token_ids = eos.value_or(std::vector<int32_t>{kDefaultEos});
  for (int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) {
      return bad(kConfig, "expected eos_token_id < vocab_size " + std::to_string(c.vocab_size) + ", found " +
                              std::to_string(id));
    }
  }
  return c;
}

Result<ModelConfig> ModelConfig::from_file(const std::filesystem::path& path) {
  KLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, size_t{16} << 20));
  auto r = from_json(text);
  if (!r.ok()) return r.status().with_context(path.string());
  return r;
}

Result<GenerationConfig> GenerationConfig::from_json(std::string_view text) {
  KLLM_ASSIGN_OR_RETURN(Json root, parse_json(text, kGenConfig));
  if (!root.is_object()) {
    return bad(kGenConfig, "expected a JSON object, found " + std::string(json_type_name(root)));
  }
  GenerationConfig g;
  KLLM_ASSIGN_OR_RETURN(g.bos_token_id, single_token_id(root, "bos_token_id", kGenConfig));
  KLLM_ASSIGN_OR_RETURN(auto eos, token_ids(root, "eos_token_id", kGenConfig));
  g.eos_token_ids = eos.value_or(std::vector<int32_t>{});
  KLLM_ASSIGN_OR_RETURN(g.temperature, json_opt_number(root, "temperature", kGenConfig));
  KLLM_ASSIGN_OR_RETURN(g.top_p, json_opt_number(root, "top_p", kGenConfig));
  KLLM_ASSIGN_OR_RETURN(g.top_k, json_opt_int(root, "top_k", kGenConfig));
  KLLM_ASSIGN_OR_RETURN(g.do_sample, json_opt_bool(root, "do_sample", kGenConfig));
  if (g.temperature && !(*g.temperature >= 0.0)) {
    return bad(kGenConfig, "expected temperature >= 0, found " + std::to_string(*g.temperature));
  }
  if (g.top_p && !(*g.top_p > 0.0 && *g.top_p <= 1.0)) {
    return bad(kGenConfig, "expected top_p in (0, 1], found " + std::to_string(*g.top_p));
  }
  if (g.top_k && *g.top_k < 0) return bad(kGenConfig, "expected top_k >= 0, found " + std::to_string(*g.top_k));
  return g;
}

Result<GenerationConfig> GenerationConfig::from_file(const std::filesystem::path& path) {
  KLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, size_t{16} << 20));
  auto r = from_json(text);
  if (!r.ok()) return r.status().with_context(path.string());
  return r;
}

Result<GenerationConfig> load_generation_config(const std::filesystem::path& dir, const ModelConfig& model) {
  const std::filesystem::path path = dir / kGenConfig;
  std::error_code ec;
  GenerationConfig g;
  if (std::filesystem::exists(path, ec)) {
    KLLM_ASSIGN_OR_RETURN(g, GenerationConfig::from_file(path));
  }
  // Like transformers, fall back to the model config's special tokens where the file is silent.
  if (g.eos_token_ids.empty()) g.eos_token_ids = model.eos_token_ids;
  if (!g.bos_token_id) g.bos_token_id = model.bos_token_id;
  return g;
}

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  const int64_t half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // torch: base ** (arange(0, dim, 2).float() / dim), all float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const auto pw = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(config.rope_theta)),
                                                static_cast<double>(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / pw;
  }
  if (config.rope_scaling.type != RopeScaling::Type::llama3) return inv;

  const RopeScaling& s = config.rope_scaling;
  const auto factor = static_cast<float>(s.factor);
  const auto low = static_cast<float>(s.low_freq_factor);
  const auto high = static_cast<float>(s.high_freq_factor);
  const auto old_ctx = static_cast<float>(s.original_max_position_embeddings);
  const double low_freq_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor;
  const double high_freq_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor;
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv) {
    const float wavelen = two_pi / f;
    float scaled = static_cast<double>(wavelen) > low_freq_wavelen ? f / factor : f;
    const bool medium = !(static_cast<double>(wavelen) < high_freq_wavelen) &&
                        !(static_cast<double>(wavelen) > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

}  // namespace kernelllm
