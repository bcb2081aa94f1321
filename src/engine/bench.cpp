// `kernelllm bench` measurement (see bench.h): builds the backend (real or seeded random
// weights), checks memory first, times one prefill and then n forks decoded together per n,
// and turns step times into tok/s and achieved GB/s. Method: every decode step is timed on
// the host around Backend::forward_sample, as generation calls it (generator.cpp), with greedy
// draws by default or sampled ones (--temperature, --top-p, --top-k), i.e. what one engine step
// costs end to end, the tokens' draw included; we report the median and the spread, and tok/s
// from the mean.
#include "kernelllm/engine/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <thread>

#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/cuda_backend.h"
#include "kernelllm/engine/model.h"
#include "engine/bench_internal.h"

namespace kernelllm {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[i];
}

// A backend with whatever must outlive it (the weights it reads, a temporary checkpoint).
struct BenchModel {
  std::unique_ptr<TempDir> temp;
  std::unique_ptr<WeightStore> weights;
  ModelConfig config;
  std::string config_json;
  std::string source;  // "random:<name>" or the model directory
  std::unique_ptr<Backend> backend;
};

struct DecodeRun {
  double prefill_ms = 0;
  std::vector<double> step_ms;
};

// One prefill of `prompt`, n forks, `steps` batched single-token forwards, each drawing the
// forks' next tokens with `params`.
Result<DecodeRun> decode_run(Backend& backend, std::span<const int32_t> prompt, int64_t n, int64_t steps,
                             const SamplingParams& params) {
  DecodeRun run;
  std::vector<SeqId> seqs;
  struct Release {
    Backend& b;
    std::vector<SeqId>& s;
    ~Release() {
      for (SeqId id : s) b.release_sequence(id);
    }
  } release{backend, seqs};
  // Tokens as generation takes them (generator.cpp): forward_sample, the prefill drawing every
  // fork's first token (sample index = fork), each step one token per row.
  std::vector<RowDraw> draws;
  for (int64_t i = 0; i < n; ++i) draws.push_back(RowDraw{0, params, static_cast<uint64_t>(i), 0});
  std::vector<int32_t> next, ids;  // the batch reads next; the pass writes ids
  // A decode step the previous run's last call launched ahead must not count as this prefill's.
  KLLM_RETURN_IF_ERROR(backend.settle());
  const auto t0 = Clock::now();
  KLLM_ASSIGN_OR_RETURN(SeqId p, backend.create_sequence());
  seqs.push_back(p);
  const ForwardRequest prefill{p, prompt, false};
  KLLM_RETURN_IF_ERROR(backend.forward_sample({&prefill, 1}, draws, next));
  run.prefill_ms = ms_since(t0);
  for (int64_t i = 0; i < n; ++i) draws[static_cast<size_t>(i)].row = i;
  for (int64_t i = 0; i < n; ++i) {
    KLLM_ASSIGN_OR_RETURN(SeqId s, backend.fork_sequence(p));
    seqs.push_back(s);
  }
  std::vector<ForwardRequest> batch(static_cast<size_t>(n));
  for (int64_t step = 0; step < steps; ++step) {
    const auto t = Clock::now();
    for (size_t i = 0; i < batch.size(); ++i) batch[i] = ForwardRequest{seqs[i + 1], {&next[i], 1}, false};
    for (RowDraw& d : draws) d.step = static_cast<uint64_t>(step) + 1;
    KLLM_RETURN_IF_ERROR(backend.forward_sample(batch, draws, ids));
    next.swap(ids);
    run.step_ms.push_back(ms_since(t));
  }
  return run;
}

// The config, and the mmapped weights of a real model; random weights come later.
Result<BenchModel> load_bench_model(const BenchOptions& o) {
  BenchModel m;
  if (!o.model.empty()) {
    KLLM_ASSIGN_OR_RETURN(LoadedModel loaded, load_model(o.model));
    m.source = loaded.dir.string();
    m.config = loaded.config;
    KLLM_ASSIGN_OR_RETURN(m.config_json, read_text_file(loaded.dir / "config.json"));
    m.weights = std::move(loaded.weights);
  } else {
    KLLM_ASSIGN_OR_RETURN(m.config_json, bench_config_json(o.config));
    KLLM_ASSIGN_OR_RETURN(m.config, ModelConfig::from_json(m.config_json));
    m.source = "random:" + o.config;
  }
  return m;
}

// CPU random weights: a seeded checkpoint in a temporary directory, mmapped like a real one.
Status write_cpu_random_weights(BenchModel& m, const BenchOptions& o, const std::function<void(std::string_view)>& log) {
  KLLM_ASSIGN_OR_RETURN(m.temp, TempDir::create("kernelllm-bench-weights"));
  if (log) log("writing a random " + std::string(dtype_name(o.dtype)) + " checkpoint to " + m.temp->path().string());
  KLLM_RETURN_IF_ERROR(write_random_checkpoint(m.temp->path(), m.config_json, o.dtype, o.seed));
  KLLM_ASSIGN_OR_RETURN(WeightStore ws, WeightStore::open(m.temp->path()));
  m.weights = std::make_unique<WeightStore>(std::move(ws));
  return {};
}

Json decode_entry(int64_t n, const DecodeRun& run, int64_t prompt_tokens,
                  uint64_t weight_bytes, uint64_t kv_token_bytes, const Result<double>& copy_gbps) {
  const auto steps = static_cast<int64_t>(run.step_ms.size());
  double total_ms = 0;
  for (double t : run.step_ms) total_ms += t;
  const double mean_ms = steps > 0 ? total_ms / static_cast<double>(steps) : 0;
  // Forward i attends over prompt + i + 1 positions; the mean over the run:
  const double mean_context = static_cast<double>(prompt_tokens) + static_cast<double>(steps + 1) / 2.0;
  const double kv_bytes = static_cast<double>(n) * mean_context * static_cast<double>(kv_token_bytes);
  const double kv_bytes_shared = (static_cast<double>(prompt_tokens) +
                                  static_cast<double>(n) * static_cast<double>(steps + 1) / 2.0) *
                                 static_cast<double>(kv_token_bytes);
  const double bytes = static_cast<double>(weight_bytes) + kv_bytes;
  const double gbps = mean_ms > 0 ? bytes / (mean_ms * 1e-3) / 1e9 : 0;
  Json e = {
      {"n", n},
      {"steps", steps},
      {"prefill_ms", run.prefill_ms},
      {"ms_per_step_median", percentile(run.step_ms, 0.5)},
      {"ms_per_step_p10", percentile(run.step_ms, 0.1)},
      {"ms_per_step_p90", percentile(run.step_ms, 0.9)},
      {"ms_per_step_mean", mean_ms},
      {"tok_s_per_seq", mean_ms > 0 ? 1000.0 / mean_ms : 0},
      {"tok_s_aggregate", mean_ms > 0 ? 1000.0 * static_cast<double>(n) / mean_ms : 0},
      {"weight_bytes_per_step", weight_bytes},
      {"kv_bytes_per_step", kv_bytes},
      {"kv_bytes_per_step_if_prompt_read_once", kv_bytes_shared},
      {"achieved_gbps", gbps},
      {"pct_of_copy_bandwidth", copy_gbps.ok() ? Json(100.0 * gbps / *copy_gbps) : Json(nullptr)},
  };
  return e;
}

}  // namespace

Result<Json> run_bench(const BenchOptions& o, const std::function<void(std::string_view)>& log) {
  KLLM_ASSIGN_OR_RETURN(bench::Device dev, bench::parse_device(o.device));
  if (o.model.empty() == o.config.empty()) {
    return error(ErrorCode::invalid_argument, "bench: expected exactly one of a model (--model) or a shape (--config)");
  }
  if (o.dtype != DType::bf16 && o.dtype != DType::f16) {
    return error(ErrorCode::invalid_argument, "bench: expected dtype bf16 or f16, found " + std::string(dtype_name(o.dtype)));
  }
  if (o.prompt_tokens < 1 || o.new_tokens < 2) {
    return error(ErrorCode::invalid_argument, "bench: expected prompt tokens >= 1 and new tokens >= 2, found " +
                                                  std::to_string(o.prompt_tokens) + " and " + std::to_string(o.new_tokens));
  }
  if (o.n.empty() || *std::min_element(o.n.begin(), o.n.end()) < 1) {
    return error(ErrorCode::invalid_argument, "bench: expected a non-empty list of n >= 1");
  }
  if (o.warmup < 0) return error(ErrorCode::invalid_argument, "bench: expected warmup >= 0");
  if (!o.peer.empty() && o.peer != "hf") {
    return error(ErrorCode::invalid_argument, "bench: expected --peer hf, found \"" + o.peer + "\"");
  }
  const int64_t max_n = *std::max_element(o.n.begin(), o.n.end());
  SamplingParams params;
  params.temperature = o.temperature;
  params.top_p = o.top_p;
  params.top_k = o.top_k;
  params.seed = o.seed;
  if (Status st = validate(params); !st.ok()) return error(ErrorCode::invalid_argument, "bench: " + st.message());

  KLLM_ASSIGN_OR_RETURN(BenchModel m, load_bench_model(o));
  const ModelConfig& c = m.config;
  if (o.prompt_tokens + o.new_tokens > c.max_position_embeddings) {
    return error(ErrorCode::out_of_range, "bench: prompt + new tokens = " + std::to_string(o.prompt_tokens + o.new_tokens) +
                                              " exceeds max_position_embeddings " + std::to_string(c.max_position_embeddings));
  }

  Json machine = bench::machine_facts(dev);
  std::shared_ptr<void> memory_cap;  // held until the run is done
  if (dev.cuda && o.memory_cap_bytes > 0) {
    if (log) log("capping device memory at " + std::to_string(o.memory_cap_bytes >> 20) + " MiB");
    KLLM_ASSIGN_OR_RETURN(memory_cap, cap_device_memory(dev.index, o.memory_cap_bytes));
  }
  Json plan = nullptr;
  if (dev.cuda) {
    KLLM_ASSIGN_OR_RETURN(plan, bench::describe_cuda_plan(dev, c, o.dtype, o.cuda_plan, o.n));
  }
  Result<double> copy_gbps = error(ErrorCode::unsupported, "copy bandwidth is measured on cuda devices only");
  if (dev.cuda) {
    if (log) log("measuring device-to-device copy bandwidth");
    copy_gbps = measure_copy_bandwidth_gbps(dev.index);
  }

  // Memory: the weights, the KV of max(n) × (prompt + new) tokens, and a workspace margin.
  const uint64_t weights_bytes =
      dev.cuda || !m.weights ? parameter_count(c) * dtype_size(o.dtype) : m.weights->total_bytes();
  const size_t kv_elem = dev.cuda ? dtype_size(o.dtype) : sizeof(float);  // the CPU cache holds fp32
  const uint64_t kv_token_bytes = kv_bytes_per_token(c, kv_elem);
  const uint64_t kv_bytes = static_cast<uint64_t>(max_n) * static_cast<uint64_t>(o.prompt_tokens + o.new_tokens) * kv_token_bytes;
  const uint64_t workspace = (dev.cuda ? (uint64_t{3} << 29) : 0) +
                             static_cast<uint64_t>(std::max(max_n, o.prompt_tokens)) * static_cast<uint64_t>(c.vocab_size) * 8;
  KLLM_ASSIGN_OR_RETURN(Json memory, bench::check_memory(dev, weights_bytes, kv_bytes, workspace, max_n,
                                                         o.prompt_tokens + o.new_tokens));

  if (dev.cuda) {
    CudaBackendOptions co;
    co.device = dev.index;
    co.dtype = o.dtype;
    co.max_sequences = max_n + 1;
    co.kv_capacity_tokens = max_n * (o.prompt_tokens + o.new_tokens) + (max_n + 1) * co.kv_page_tokens;
    co.cuda_graphs = o.cuda_graphs;
    co.plan = o.cuda_plan;
    if (log) log("building the CUDA backend");
    if (m.weights) {
      KLLM_ASSIGN_OR_RETURN(m.backend, make_cuda_backend(c, *m.weights, co));
    } else {
      KLLM_ASSIGN_OR_RETURN(m.backend, make_cuda_backend_random(c, o.seed, co));
    }
  } else {
    if (!m.weights) KLLM_RETURN_IF_ERROR(write_cpu_random_weights(m, o, log));
    CpuBackendOptions co;
    co.num_threads = o.threads;
    co.max_sequences = max_n + 1;
    KLLM_ASSIGN_OR_RETURN(m.backend, make_cpu_backend(c, *m.weights, co));
  }

  const std::vector<int32_t> prompt = bench::random_prompt(o.prompt_tokens, c.vocab_size, o.seed);
  const uint64_t weight_read = decode_weight_bytes(c, dev.cuda ? dtype_size(o.dtype) : weights_bytes / parameter_count(c));
  Json decode = Json::array();
  std::vector<double> prefills;
  for (int64_t n : o.n) {
    for (int64_t w = 0; w < o.warmup; ++w) {
      KLLM_RETURN_IF_ERROR(decode_run(*m.backend, prompt, n, std::min<int64_t>(o.new_tokens - 1, 4), params).status());
    }
    if (log) log("decoding n = " + std::to_string(n));
    KLLM_ASSIGN_OR_RETURN(DecodeRun run, decode_run(*m.backend, prompt, n, o.new_tokens - 1, params));
    prefills.push_back(run.prefill_ms);
    decode.push_back(decode_entry(n, run, o.prompt_tokens, weight_read, kv_token_bytes, copy_gbps));
  }
  const std::string backend_name(m.backend->name());
  m.backend.reset();  // frees the device before a peer runs on it

  const double prefill_ms = percentile(prefills, 0.5);
  Json result = {
      {"kernelllm_bench", 1},
      {"command", o.command_line},
      {"machine", machine},
      {"model",
       {{"source", m.source},
        {"parameters", parameter_count(c)},
        {"hidden_size", c.hidden_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"vocab_size", c.vocab_size},
        {"weights_bytes", weights_bytes},
        {"decode_weight_bytes_per_step", weight_read},
        {"kv_bytes_per_token", kv_token_bytes}}},
      {"options",
       {{"device", o.device},
        {"backend", backend_name},
        {"dtype", dtype_name(o.dtype)},
        {"prompt_tokens", o.prompt_tokens},
        {"new_tokens", o.new_tokens},
        {"n", o.n},
        {"warmup", o.warmup},
        {"seed", o.seed},
        {"sampling", o.temperature == 0.0f ? "greedy as generation takes it (Backend::forward_sample; the CUDA "
                                             "backend picks on the device), eos ignored"
                                           : "sampled as generation takes it (Backend::forward_sample, sample "
                                             "index = fork), eos ignored"},
        {"temperature", o.temperature},
        {"top_p", o.top_p},
        {"top_k", o.top_k},
        {"cuda_graphs", o.cuda_graphs},
        {"memory_cap_bytes", o.memory_cap_bytes > 0 ? Json(o.memory_cap_bytes) : Json(nullptr)}}},
      {"cuda_plan", plan},
      {"memory", memory},
      {"copy_bandwidth",
       copy_gbps.ok() ? Json{{"available", true}, {"gbps", *copy_gbps}, {"method", "cuMemcpyDtoD 1 GiB, median of 20, read+write bytes"}}
                      : Json{{"available", false}, {"gbps", nullptr}, {"reason", copy_gbps.status().to_string()}}},
      {"prefill",
       {{"tokens", o.prompt_tokens},
        {"ms_median", prefill_ms},
        {"ms_all", prefills},
        {"tok_s", prefill_ms > 0 ? 1000.0 * static_cast<double>(o.prompt_tokens) / prefill_ms : 0}}},
      {"decode", decode},
  };
  if (o.peer == "hf") {
    if (log) log("running the HF transformers peer");
    result["peer"] = bench::run_hf_peer(o, m.config_json, prompt);
  }
  return result;
}

}  // namespace kernelllm
