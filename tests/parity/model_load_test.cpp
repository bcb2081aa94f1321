// load_model on the tiny HF-written checkpoints of tools/make_tiny_llama.py: by directory and
// by HF id through a cache layout built in a temp dir; broken copies give errors naming the file.
#include "kernelllm/engine/model.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "parity/tiny_llama_golden.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

const char* const kModels[] = {"tiny-f32-gqa", "tiny-bf16-sharded", "tiny-f32-tied"};

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("kllm_load_test_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A copy of models/<name> made of symlinks (as the HF cache's snapshots are), minus `skip`.
fs::path link_copy(const fs::path& from, const fs::path& to, const std::string& skip = "") {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.path().filename() != skip) fs::create_symlink(e.path(), to / e.path().filename());
  }
  return to;
}

TEST(LoadModel, LoadsEveryTinyCheckpointByDirectory) {
  const fs::path root = testing::testdata_dir();
  ASSERT_FALSE(root.empty());
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    auto m = load_model((root / "models" / name).string());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const ModelConfig& c = m->config;
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.vocab_size, 128256);
    EXPECT_EQ(m->generation.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
    EXPECT_EQ(m->generation.bos_token_id, 128000);
    EXPECT_EQ(m->tokenizer.bos_id(), 128000);
    EXPECT_LE(m->tokenizer.vocab_size(), c.vocab_size);

    const int64_t emb[] = {c.vocab_size, c.hidden_size};
    EXPECT_TRUE(m->weights->get_float("model.embed_tokens.weight", emb).ok());
    EXPECT_EQ(m->weights->contains("lm_head.weight"), !c.tie_word_embeddings);
    const int64_t q[] = {c.num_attention_heads * c.head_dim, c.hidden_size};
    const int64_t k[] = {c.num_key_value_heads * c.head_dim, c.hidden_size};
    const int64_t up[] = {c.intermediate_size, c.hidden_size};
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      const std::string p = "model.layers." + std::to_string(layer) + ".";
      EXPECT_TRUE(m->weights->get_float(p + "self_attn.q_proj.weight", q).ok());
      auto kv = m->weights->get_float(p + "self_attn.k_proj.weight", k);
      EXPECT_TRUE(kv.ok()) << kv.status().to_string();
      EXPECT_TRUE(m->weights->get_float(p + "mlp.up_proj.weight", up).ok());
    }
  }
}

TEST(LoadModel, LoadsByHfIdFromTheLocalCache) {
  const fs::path root = testing::testdata_dir();
  ASSERT_FALSE(root.empty());
  TempDir tmp;
  const fs::path repo = tmp.path() / "hub" / "models--facebook--KernelLLM";
  const fs::path snapshot = link_copy(root / "models" / "tiny-bf16-sharded", repo / "snapshots" / "0123abcd");
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "0123abcd";
  const char* old = std::getenv("HF_HUB_CACHE");
  const std::string saved = old ? old : "";
  ::setenv("HF_HUB_CACHE", (tmp.path() / "hub").c_str(), 1);
  auto m = load_model("facebook/KernelLLM");
  if (old) {
    ::setenv("HF_HUB_CACHE", saved.c_str(), 1);
  } else {
    ::unsetenv("HF_HUB_CACHE");
  }
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dir, snapshot);
  EXPECT_GT(m->weights->total_bytes(), 0u);
}

TEST(LoadModel, ErrorsNameTheMissingOrBrokenFile) {
  const fs::path root = testing::testdata_dir();
  ASSERT_FALSE(root.empty());
  const fs::path src = root / "models" / "tiny-bf16-sharded";
  TempDir tmp;
  for (const char* file : {"config.json", "tokenizer.json", "model-00002-of-00003.safetensors"}) {
    SCOPED_TRACE(file);
    const fs::path dir = link_copy(src, tmp.path() / (std::string("without_") + file), file);
    auto m = load_model(dir.string());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(file), std::string::npos) << m.status().message();
  }
  const fs::path dir = link_copy(src, tmp.path() / "bad_config", "config.json");
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "hidden_size": 64})";
  auto m = load_model(dir.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find((dir / "config.json").string()), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("intermediate_size"), std::string::npos) << m.status().message();
}

}  // namespace
}  // namespace kernelllm
