// Model and generation configuration read from an HF checkpoint's config.json and
// generation_config.json. Only the Llama family (LlamaForCausalLM) is supported; anything
// else, or a missing/ill-typed field, is a clear error naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"

namespace kernelllm {

// HF `rope_scaling`; llama3 follows transformers' _compute_llama3_parameters
// (modeling_rope_utils.py): wavelengths above original_max/low_freq_factor are divided by
// `factor`, below original_max/high_freq_factor kept, smoothly interpolated in between.
struct RopeScaling {
  enum class Type { none, llama3 };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;          // "LlamaForCausalLM"
  int64_t hidden_size = 0;           // d_model (4096 for 8B)
  int64_t intermediate_size = 0;     // MLP width (14336)
  int64_t num_hidden_layers = 0;     // 32
  int64_t num_attention_heads = 0;   // query heads (32)
  int64_t num_key_value_heads = 0;   // KV heads (8); defaults to num_attention_heads
  int64_t head_dim = 0;              // defaults to hidden_size / num_attention_heads
  int64_t vocab_size = 0;            // 128256
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;  // true: lm_head reuses model.embed_tokens.weight
  bool attention_bias = false;       // q/k/v/o biases (not in Llama-3; rejected when true)
  bool mlp_bias = false;             // rejected when true
  std::string hidden_act = "silu";   // only silu is supported
  std::string torch_dtype;           // as written in config.json ("bfloat16"), may be empty
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json's eos_token_id (int or list)

  static Result<ModelConfig> from_json(std::string_view text);
  static Result<ModelConfig> from_file(const std::filesystem::path& path);
};

// generation_config.json. Every field optional; absent file → defaults (see load_generation_config).
struct GenerationConfig {
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // stop ids: KernelLLM has [128001, 128008, 128009]
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<bool> do_sample;

  static Result<GenerationConfig> from_json(std::string_view text);
  static Result<GenerationConfig> from_file(const std::filesystem::path& path);
};

// Reads `dir`/generation_config.json when present; otherwise a GenerationConfig whose stop
// ids are the model config's eos ids. A present but malformed file is an error.
Result<GenerationConfig> load_generation_config(const std::filesystem::path& dir, const ModelConfig& model);

// The model's inverse RoPE frequencies [head_dim / 2], computed in float32 as transformers does
// (_compute_default_rope_parameters, _compute_llama3_parameters in modeling_rope_utils.py); both
// backends rotate with these.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace kernelllm
