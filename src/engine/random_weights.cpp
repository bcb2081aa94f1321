// Random-weight models (random_weights.h): the built-in named configs (KernelLLM's exact 8B
// config and tiny CPU-sized ones) and the seeded random-weight checkpoint the CPU backend loads.
#include "kernelllm/engine/random_weights.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <system_error>

#include "kernelllm/base/file.h"
#include "kernelllm/base/json.h"
#include "kernelllm/engine/config.h"

namespace kernelllm {

namespace {

struct NamedShape {
  const char* name;
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab, max_positions;
  bool llama3_rope;
};

// llama-3.1-8b is KernelLLM's config.json (SPEC-engine.md); the others are for CPU runs and CI.
constexpr NamedShape kShapes[] = {
    {"llama-3.1-8b", 4096, 14336, 32, 32, 8, 128256, 131072, true},
    {"tiny", 64, 160, 2, 4, 2, 1024, 4096, true},
    {"small", 256, 688, 4, 8, 4, 32000, 8192, true},
    {"tiny-llama3-vocab", 64, 160, 2, 4, 2, 128256, 4096, true},
};

Json shape_json(const NamedShape& s) {
  Json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"bos_token_id", 128000},
      {"eos_token_id", {128001, 128008, 128009}},
      {"head_dim", s.hidden / s.heads},
      {"hidden_act", "silu"},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.intermediate},
      {"max_position_embeddings", s.max_positions},
      {"num_attention_heads", s.heads},
      {"num_hidden_layers", s.layers},
      {"num_key_value_heads", s.kv_heads},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 500000.0},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"vocab_size", s.vocab},
  };
  if (s.vocab < 128256) {
    j["bos_token_id"] = 1;
    j["eos_token_id"] = {2};
  }
  if (s.llama3_rope) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  }
  return j;
}

// splitmix64: a seeded stream per tensor, independent of the order tensors are written in.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint16_t to_bf16(float x) {
  const auto bits = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
}

// IEEE half, round to nearest; the values here are small and finite (no inf/NaN inputs).
uint16_t to_f16(float x) {
  const auto bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(x);
  if (a < 6.103515625e-05f) {  // below 2^-14: subnormal, units of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t abits = bits & 0x7FFFFFFFu;
  uint32_t h = ((abits >> 23) - 112u) << 10 | ((abits >> 13) & 0x3FFu);
  const uint32_t rest = abits & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(h));
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool ones;  // RMSNorm weights
};

std::vector<TensorSpec> llama_tensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.num_attention_heads * hd,
                kv = c.num_key_value_heads * hd, m = c.intermediate_size;
  std::vector<TensorSpec> t = {{"model.embed_tokens.weight", {c.vocab_size, h}, false}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", {h}, true});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, false});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}, false});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}, false});
    t.push_back({p + "self_attn.o_proj.weight", {h, q}, false});
    t.push_back({p + "post_attention_layernorm.weight", {h}, true});
    t.push_back({p + "mlp.gate_proj.weight", {m, h}, false});
    t.push_back({p + "mlp.up_proj.weight", {m, h}, false});
    t.push_back({p + "mlp.down_proj.weight", {h, m}, false});
  }
  t.push_back({"model.norm.weight", {h}, true});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, h}, false});
  return t;
}

}  // namespace

std::vector<std::string> named_config_names() {
  std::vector<std::string> out;
  for (const NamedShape& s : kShapes) out.emplace_back(s.name);
  return out;
}

Result<std::string> named_config_json(std::string_view name) {
  std::string known;
  for (const NamedShape& s : kShapes) {
    if (name == s.name) return shape_json(s).dump(2);
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  return error(ErrorCode::not_found,
               "bench: unknown config \"" + std::string(name) + "\"; expected one of " + known + " or a config.json path");
}

Result<std::string> bench_config_json(std::string_view name_or_path) {
  for (const NamedShape& s : kShapes) {
    if (name_or_path == s.name) return named_config_json(name_or_path);
  }
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(name_or_path), ec)) return named_config_json(name_or_path);
  std::filesystem::path path(name_or_path);
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  return read_text_file(path);
}

Status write_random_checkpoint(const std::filesystem::path& dir, std::string_view config_json, DType dtype,
                               uint64_t seed) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    return error(ErrorCode::invalid_argument,
                 "random checkpoint: expected dtype F32, F16 or BF16, found " + std::string(dtype_name(dtype)));
  }
  KLLM_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_json(config_json));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(ErrorCode::io_error, dir.string() + ": cannot create directory: " + ec.message());
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_json << '\n';
    if (!cfg) return error(ErrorCode::io_error, (dir / "config.json").string() + ": cannot write");
  }
  const std::vector<TensorSpec> tensors = llama_tensors(config);
  const size_t esize = dtype_size(dtype);
  Json header = Json::object();
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + numel * esize}}};
    offset += numel * esize;
  }
  header["__metadata__"] = {{"format", "pt"}, {"kernelllm_random_seed", std::to_string(seed)}};
  std::string head = header.dump();
  while ((head.size() + 8) % 8 != 0) head.push_back(' ');  // data area 8-byte aligned
  const std::filesystem::path file = dir / "model.safetensors";
  std::ofstream out(file, std::ios::binary);
  uint64_t head_len = head.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(head_len >> (8 * i));
  out.write(reinterpret_cast<const char*>(len_le), 8);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  // Uniform on [-a, a] has std a / sqrt(3); a = 0.02 * sqrt(3) gives HF's initializer_range 0.02.
  const float a = 0.02f * std::sqrt(3.0f);
  std::vector<unsigned char> buf;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const TensorSpec& t = tensors[ti];
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    uint64_t state = seed * 0x100000001B3ull + ti;
    buf.resize(static_cast<size_t>(numel) * esize);
    for (uint64_t i = 0; i < numel; ++i) {
      float v = 1.0f;
      if (!t.ones) {
        const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
        v = static_cast<float>((2.0 * u - 1.0) * a);
      }
      unsigned char* dst = buf.data() + i * esize;
      if (dtype == DType::f32) {
        std::memcpy(dst, &v, 4);
      } else {
        const uint16_t b = dtype == DType::bf16 ? to_bf16(v) : to_f16(v);
        dst[0] = static_cast<unsigned char>(b & 0xFF);
        dst[1] = static_cast<unsigned char>(b >> 8);
      }
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  if (!out) return error(ErrorCode::io_error, file.string() + ": cannot write");
  return {};
}

}  // namespace kernelllm
