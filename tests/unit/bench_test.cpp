// The bench library on the CPU: named shapes (the 8B one has KernelLLM's exact parameter
// count), seeded random checkpoints that the CPU backend loads, the byte counts behind GB/s,
// a full run_bench on a tiny random model (fields present, numbers positive; no timing
// assertions), the clear errors: memory that does not fit, bad options; and the commit recorded
// for a build without a checkout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "engine/bench_internal.h"
#include "engine/cpu/ops.h"
#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/bench.h"

namespace kernelllm {
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kernelllm-bench-test-" + name + "-" +
                                                            std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dir);
  return dir;
}

ModelConfig named(const std::string& name) {
  auto json = named_config_json(name);
  EXPECT_TRUE(json.ok()) << json.status().to_string();
  auto c = ModelConfig::from_json(json.ok() ? *json : "{}");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

TEST(BenchConfig, Llama8bIsKernelLlmsShape) {
  const ModelConfig c = named("llama-3.1-8b");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(parameter_count(c), uint64_t{8030261248});
  // Every weight but the embedding table: ≈15.0 GB in bf16, the decode-step floor's numerator.
  EXPECT_EQ(decode_weight_bytes(c, 2), (uint64_t{8030261248} - uint64_t{128256} * 4096) * 2);
  EXPECT_EQ(kv_bytes_per_token(c, 2), uint64_t{128} * 1024);
}

TEST(BenchConfig, UnknownNameListsKnownShapes) {
  auto r = bench_config_json("llama-9");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  for (const auto& name : named_config_names()) EXPECT_NE(r.status().message().find(name), std::string::npos);
}

TEST(BenchRandomCheckpoint, LoadsIntoTheCpuBackendAndIsSeeded) {
  auto json = named_config_json("tiny");
  ASSERT_TRUE(json.ok());
  const auto a = fresh_dir("a"), b = fresh_dir("b"), c = fresh_dir("c");
  ASSERT_TRUE(write_random_checkpoint(a, *json, DType::f16, 7).ok());
  ASSERT_TRUE(write_random_checkpoint(b, *json, DType::f16, 7).ok());
  ASSERT_TRUE(write_random_checkpoint(c, *json, DType::f16, 8).ok());
  auto wa = WeightStore::open(a);
  auto wb = WeightStore::open(b);
  auto wc = WeightStore::open(c);
  ASSERT_TRUE(wa.ok() && wb.ok() && wc.ok()) << wa.status().to_string();
  const ModelConfig config = named("tiny");
  EXPECT_EQ(wa->total_bytes(), parameter_count(config) * 2);

  auto q = wa->get("model.layers.1.self_attn.q_proj.weight");
  auto q_same = wb->get("model.layers.1.self_attn.q_proj.weight");
  auto q_other = wc->get("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok() && q_same.ok() && q_other.ok());
  EXPECT_TRUE(std::equal(q->data.begin(), q->data.end(), q_same->data.begin()));
  EXPECT_FALSE(std::equal(q->data.begin(), q->data.end(), q_other->data.begin()));
  double sum_sq = 0;
  const auto count = static_cast<size_t>(q->numel());
  for (size_t i = 0; i < count; ++i) {
    const auto bits = static_cast<uint16_t>(std::to_integer<uint16_t>(q->data[2 * i]) |
                                            std::to_integer<uint16_t>(q->data[2 * i + 1]) << 8);
    const float v = cpu::f16_to_float(bits);
    ASSERT_LE(std::fabs(v), 0.0347f);
    sum_sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(std::sqrt(sum_sq / static_cast<double>(count)), 0.02, 0.002);
  auto norm = wa->get("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(cpu::f16_to_float(static_cast<uint16_t>(std::to_integer<uint16_t>(norm->data[0]) |
                                                    std::to_integer<uint16_t>(norm->data[1]) << 8)),
            1.0f);

  auto backend = make_cpu_backend(config, *wa);
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  for (const auto& d : {a, b, c}) std::filesystem::remove_all(d);
}

// A run of the tiny shape on the CPU.
BenchOptions tiny_cpu(int64_t prompt_tokens, int64_t new_tokens, std::vector<int64_t> n, int64_t warmup) {
  BenchOptions o;
  o.config = "tiny";
  o.device = "cpu";
  o.prompt_tokens = prompt_tokens;
  o.new_tokens = new_tokens;
  o.n = std::move(n);
  o.warmup = warmup;
  return o;
}

TEST(Bench, TinyCpuRunReportsEveryField) {
  BenchOptions o = tiny_cpu(12, 5, {1, 3}, 1);
  o.command_line = "bench_test";
  setenv("KERNELLLM_BENCH_TEST_SWITCH", "7", 1);  // a run's KERNELLLM_* switches are recorded
  auto r = run_bench(o);
  unsetenv("KERNELLLM_BENCH_TEST_SWITCH");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Json& j = *r;
  EXPECT_EQ(j["command"], "bench_test");
  EXPECT_EQ(j["options"]["backend"], "cpu");
  EXPECT_FALSE(j["copy_bandwidth"]["available"].get<bool>());
  EXPECT_TRUE(j["memory"]["checked"].get<bool>());
  EXPECT_GT(j["memory"]["required_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(j["machine"]["cpu"].get<std::string>().empty());
  EXPECT_EQ(j["machine"]["kernelllm_version"], KERNELLLM_VERSION);
  EXPECT_GT(j["prefill"]["ms_median"].get<double>(), 0.0);
  EXPECT_EQ(j["prefill"]["tokens"], 12);
  ASSERT_EQ(j["decode"].size(), 2u);
  const ModelConfig c = named("tiny");
  for (size_t i = 0; i < 2; ++i) {
    const Json& e = j["decode"][i];
    const int64_t n = i == 0 ? 1 : 3;
    EXPECT_EQ(e["n"], n);
    EXPECT_EQ(e["steps"], 4);
    for (const char* key : {"prefill_ms", "ms_per_step_median", "ms_per_step_p10", "ms_per_step_p90",
                            "ms_per_step_mean", "tok_s_per_seq", "tok_s_aggregate", "achieved_gbps"}) {
      ASSERT_TRUE(e.contains(key)) << key;
      EXPECT_GT(e[key].get<double>(), 0.0) << key;
    }
    EXPECT_NEAR(e["tok_s_aggregate"].get<double>(), static_cast<double>(n) * e["tok_s_per_seq"].get<double>(), 1e-6);
    EXPECT_TRUE(e["pct_of_copy_bandwidth"].is_null());
    EXPECT_EQ(e["weight_bytes_per_step"].get<uint64_t>(), decode_weight_bytes(c, 2));
    // Forwards attend over 13..16 positions (mean 14.5) in each of n sequences; the CPU KV is fp32.
    EXPECT_DOUBLE_EQ(e["kv_bytes_per_step"].get<double>(),
                     static_cast<double>(n) * 14.5 * static_cast<double>(kv_bytes_per_token(c, 4)));
  }
  EXPECT_EQ(j["machine"]["environment"].value("KERNELLLM_BENCH_TEST_SWITCH", std::string()), "7");
  const std::string table = format_bench_table(j);
  EXPECT_NE(table.find("prefill:"), std::string::npos);
  EXPECT_NE(table.find("tok/s/seq"), std::string::npos);
  EXPECT_NE(table.find("KERNELLLM_BENCH_TEST_SWITCH=7"), std::string::npos) << table;
}

TEST(Bench, RunThatDoesNotFitIsAClearError) {
  BenchOptions o;
  o.config = "llama-3.1-8b";
  o.device = "cpu";
  o.n = {4096};  // 4096 × 2012 tokens × 512 KiB of fp32 KV: terabytes
  auto r = run_bench(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::resource_exhausted);
  EXPECT_NE(r.status().message().find("does not fit"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("n = 4096"), std::string::npos) << r.status().to_string();
}

TEST(Bench, BadOptionsAreErrors) {
  const auto fails_with = [](BenchOptions o, const std::string& text) {
    auto r = run_bench(o);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().to_string();
  };
  BenchOptions base;
  base.config = "tiny";
  base.prompt_tokens = 4;
  base.new_tokens = 3;
  BenchOptions o = base;
  o.device = "gpu";
  fails_with(o, "expected cpu, cuda or cuda:N");
  o = base;
  o.model = "/nonexistent";
  fails_with(o, "exactly one of");
  o = base;
  o.n = {2, 0};
  fails_with(o, "n >= 1");
  o = base;
  o.new_tokens = 1;
  fails_with(o, "new tokens >= 2");
  o = base;
  o.dtype = DType::f32;
  fails_with(o, "bf16 or f16");
  o = base;
  o.prompt_tokens = 4000;
  o.new_tokens = 200;
  fails_with(o, "exceeds max_position_embeddings");
  o = base;
  o.peer = "vllm";
  fails_with(o, "--peer hf");
  o = base;
  o.temperature = -0.5f;
  fails_with(o, "temperature >= 0");
  o = base;
  o.temperature = 0.6f;
  o.top_p = 0.0f;
  fails_with(o, "top_p in (0, 1]");
}

TEST(Bench, SampledRunRecordsHowTokensWereDrawn) {
  BenchOptions o = tiny_cpu(8, 4, {2}, 0);
  o.temperature = 0.6f;
  o.top_p = 0.95f;
  o.top_k = 40;
  auto r = run_bench(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Json& opts = (*r)["options"];
  EXPECT_NE(opts["sampling"].get<std::string>().find("sampled"), std::string::npos);
  EXPECT_FLOAT_EQ(opts["temperature"].get<float>(), 0.6f);
  EXPECT_FLOAT_EQ(opts["top_p"].get<float>(), 0.95f);
  EXPECT_EQ(opts["top_k"], 40);
  ASSERT_EQ((*r)["decode"].size(), 1u);
  EXPECT_EQ((*r)["decode"][0]["steps"], 3);
}

// Outside a checkout (a build from `git archive`) the commit comes from KERNELLLM_GIT_COMMIT,
// only when it looks like one (7 to 40 hex digits).
TEST(BenchMachine, CommitOutsideACheckoutComesFromTheEnvironment) {
  const std::filesystem::path no_checkout;
  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  setenv("KERNELLLM_GIT_COMMIT", sha.c_str(), 1);
  EXPECT_EQ(bench::git_commit_of(no_checkout), sha);
  setenv("KERNELLLM_GIT_COMMIT", "d3b8d73", 1);
  EXPECT_EQ(bench::git_commit_of(no_checkout), "d3b8d73");
  for (const char* bad : {"", "abc", "not-a-commit", "0123456789abcdef0123456789abcdef012345678"}) {
    setenv("KERNELLLM_GIT_COMMIT", bad, 1);
    EXPECT_EQ(bench::git_commit_of(no_checkout), "") << bad;
  }
  unsetenv("KERNELLLM_GIT_COMMIT");
  EXPECT_EQ(bench::git_commit_of(no_checkout), "");
  // A directory that is not a checkout falls back the same way.
  const auto dir = fresh_dir("no-git");
  std::filesystem::create_directories(dir);
  setenv("KERNELLLM_GIT_COMMIT", sha.c_str(), 1);
  EXPECT_EQ(bench::git_commit_of(dir), sha);
  unsetenv("KERNELLLM_GIT_COMMIT");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kernelllm
