// ModelConfig / GenerationConfig parsing: the Llama-3.1-8B config, HF defaults, both rope
// spellings (legacy rope_scaling and transformers 5 rope_parameters), and every rejection.
#include "kernelllm/engine/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernelllm/base/json.h"

namespace kernelllm {
namespace {

// Llama-3.1-8B-Instruct's config.json as transformers 4.x writes it (numbers from SPEC-engine.md).
constexpr const char* k8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0", "use_cache": true, "vocab_size": 128256
})";

// The smallest config we accept: required sizes only.
Json minimal() {
  return Json{{"model_type", "llama"},     {"hidden_size", 64},  {"intermediate_size", 128},
              {"num_hidden_layers", 2},    {"num_attention_heads", 4}, {"vocab_size", 300}};
}

Result<ModelConfig> parse(const Json& j) { return ModelConfig::from_json(j.dump()); }

TEST(ModelConfig, Parses8BConfig) {
  auto r = ModelConfig::from_json(k8B);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(ModelConfig, AppliesHfDefaultsWhenFieldsAreAbsent) {
  auto r = parse(minimal());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->architecture, "LlamaForCausalLM");
  EXPECT_EQ(r->num_key_value_heads, 4);  // = num_attention_heads (no GQA)
  EXPECT_EQ(r->head_dim, 16);            // = hidden / heads
  EXPECT_EQ(r->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(r->rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(r->rope_theta, 10000.0);
  EXPECT_EQ(r->rope_scaling.type, RopeScaling::Type::none);
  EXPECT_EQ(r->hidden_act, "silu");
  EXPECT_EQ(r->bos_token_id, 1);
  EXPECT_EQ(r->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(r->torch_dtype, "");
}

TEST(ModelConfig, GqaAndExplicitHeadDim) {
  Json j = minimal();
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 32;
  j["eos_token_id"] = 7;
  j["bos_token_id"] = nullptr;
  j["tie_word_embeddings"] = true;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_key_value_heads, 2);
  EXPECT_EQ(r->head_dim, 32);
  EXPECT_EQ(r->eos_token_ids, std::vector<int32_t>{7});
  EXPECT_FALSE(r->bos_token_id.has_value());
  EXPECT_TRUE(r->tie_word_embeddings);
}

// What transformers 5.23's LlamaConfig.save_pretrained writes: "dtype", no "architectures"
// for a bare config, rope_theta and the llama3 parameters nested under "rope_parameters".
TEST(ModelConfig, ParsesTransformers5RopeParameters) {
  Json j = minimal();
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"factor", 8.0},      {"high_freq_factor", 4.0},
                          {"low_freq_factor", 1.0}, {"original_max_position_embeddings", 8192},
                          {"rope_theta", 500000.0}, {"rope_type", "llama3"}};
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->torch_dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(r->rope_theta, 500000.0);
  EXPECT_EQ(r->rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_DOUBLE_EQ(r->rope_scaling.factor, 8.0);
  EXPECT_EQ(r->rope_scaling.original_max_position_embeddings, 8192);

  j["rope_parameters"] = {{"rope_theta", 12345.0}, {"rope_type", "default"}};
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->rope_theta, 12345.0);
  EXPECT_EQ(r->rope_scaling.type, RopeScaling::Type::none);
}

TEST(ModelConfig, AcceptsLegacyTypeKeyAndNullScaling) {
  Json j = minimal();
  j["max_position_embeddings"] = 4096;
  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_DOUBLE_EQ(r->rope_scaling.factor, 2.0);
  EXPECT_EQ(r->rope_scaling.original_max_position_embeddings, 4096);  // HF: defaults to max positions

  j["rope_scaling"] = nullptr;
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->rope_scaling.type, RopeScaling::Type::none);
}

TEST(ModelConfig, RejectsOtherRopeTypes) {
  Json j = minimal();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::unsupported);
  EXPECT_NE(r.status().message().find("yarn"), std::string::npos) << r.status().message();

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("high_freq_factor"), std::string::npos) << r.status().message();
}

TEST(ModelConfig, RejectsUnsupportedArchitectureNamingIt) {
  Json j = minimal();
  j.erase("model_type");
  j["architectures"] = {"MistralForCausalLM"};
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::unsupported);
  EXPECT_NE(r.status().message().find("MistralForCausalLM"), std::string::npos) << r.status().message();

  j = minimal();
  j["model_type"] = "qwen2";
  r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::unsupported);
  EXPECT_NE(r.status().message().find("qwen2"), std::string::npos);

  j = minimal();
  j.erase("model_type");
  r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::unsupported);
}

TEST(ModelConfig, MissingRequiredFieldIsNamed) {
  Json j = minimal();
  j.erase("hidden_size");
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);
}

TEST(ModelConfig, WrongTypeSaysExpectedAndFound) {
  Json j = minimal();
  j["num_hidden_layers"] = "32";
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::parse_error);
  EXPECT_NE(r.status().message().find("expected integer"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("found string"), std::string::npos) << r.status().message();

  j = minimal();
  j["eos_token_id"] = {1, "two"};
  EXPECT_FALSE(parse(j).ok());
  j["eos_token_id"] = -3;
  EXPECT_FALSE(parse(j).ok());
}

TEST(ModelConfig, RejectsInvalidShapesAndFeatures) {
  auto expect_error = [](Json j, std::string_view needle, ErrorCode code) {
    auto r = parse(j);
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  Json j = minimal();
  j["num_key_value_heads"] = 3;
  expect_error(j, "multiple of num_key_value_heads", ErrorCode::parse_error);
  j = minimal();
  j["hidden_size"] = 0;
  expect_error(j, "hidden_size", ErrorCode::parse_error);
  j = minimal();
  j["num_key_value_heads"] = -1;
  expect_error(j, "num_key_value_heads", ErrorCode::parse_error);
  j = minimal();
  j["hidden_act"] = "gelu";
  expect_error(j, "gelu", ErrorCode::unsupported);
  j = minimal();
  j["attention_bias"] = true;
  expect_error(j, "attention_bias", ErrorCode::unsupported);
  j = minimal();
  j["mlp_bias"] = true;
  expect_error(j, "mlp_bias", ErrorCode::unsupported);
  j = minimal();
  j["head_dim"] = 15;
  expect_error(j, "even head_dim", ErrorCode::parse_error);
  j = minimal();
  j["eos_token_id"] = 300;
  expect_error(j, "vocab_size", ErrorCode::parse_error);
}

TEST(ModelConfig, BadJsonIsParseError) {
  for (const char* text : {"", "{", "{\"hidden_size\": 4096,}", "[1, 2]", "null", "\xff\xfe"}) {
    auto r = ModelConfig::from_json(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), ErrorCode::parse_error) << text;
  }
}

TEST(ModelConfig, FromFileNamesTheFile) {
  auto dir = std::filesystem::temp_directory_path() / ("kllm_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << R"({"model_type": "llama", "hidden_size": "x"})";
  }
  auto r = ModelConfig::from_file(dir / "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find((dir / "config.json").string()), std::string::npos);
  auto missing = ModelConfig::from_file(dir / "nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  std::filesystem::remove_all(dir);
}

TEST(GenerationConfig, ParsesKernelLlmStyleFile) {
  auto r = GenerationConfig::from_json(
      R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
          "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.45.0"})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->bos_token_id, 128000);
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_DOUBLE_EQ(*r->temperature, 0.6);
  EXPECT_DOUBLE_EQ(*r->top_p, 0.9);
  EXPECT_FALSE(r->top_k.has_value());
  EXPECT_EQ(r->do_sample, true);

  EXPECT_FALSE(GenerationConfig::from_json(R"({"top_p": "high"})").ok());
  EXPECT_FALSE(GenerationConfig::from_json(R"({"top_p": 1.5})").ok());
  EXPECT_FALSE(GenerationConfig::from_json(R"({"eos_token_id": [1, 2.5]})").ok());
  EXPECT_FALSE(GenerationConfig::from_json("[]").ok());
}

TEST(GenerationConfig, LoadFallsBackToModelConfigTokens) {
  auto dir = std::filesystem::temp_directory_path() / ("kllm_genconfig_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto model = ModelConfig::from_json(k8B);
  ASSERT_TRUE(model.ok());

  auto absent = load_generation_config(dir, *model);
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->eos_token_ids, model->eos_token_ids);
  EXPECT_EQ(absent->bos_token_id, 128000);
  EXPECT_FALSE(absent->temperature.has_value());

  {
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 128009, "temperature": 0.6})";
  }
  auto present = load_generation_config(dir, *model);
  ASSERT_TRUE(present.ok()) << present.status().to_string();
  EXPECT_EQ(present->eos_token_ids, std::vector<int32_t>{128009});
  EXPECT_DOUBLE_EQ(*present->temperature, 0.6);

  {
    std::ofstream(dir / "generation_config.json") << "{broken";
  }
  auto broken = load_generation_config(dir, *model);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("generation_config.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kernelllm
