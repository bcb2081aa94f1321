// Support for `kernelllm bench` (bench_internal.h): devices, temp dirs, machine facts, the
// memory check, the seeded prompt, and the HF transformers peer run as a subprocess.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "engine/bench_internal.h"
#include "engine/cuda_plan.h"
#include "kernelllm/base/device.h"
#include "kernelllm/base/file.h"
#include "kernelllm/base/system.h"

namespace kernelllm::bench {

namespace {
// A prompt long enough that the prefill attention takes query blocks (describe_cuda_plan).
constexpr int64_t kPrefillProbeTokens = 64;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// stdout of a shell command, trimmed; empty on failure.
std::string capture(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return {};
  std::string out;
  char buf[512];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  const int rc = pclose(p);
  if (rc != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string gib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
  return buf;
}

}  // namespace

Result<Device> parse_device(std::string_view text) {
  KLLM_ASSIGN_OR_RETURN(DeviceSpec d, kernelllm::parse_device(text, "bench: --device"));
  return Device{d.cuda, d.index_or_0()};
}

std::vector<int32_t> random_prompt(int64_t count, int64_t vocab, uint64_t seed) {
  const auto range = static_cast<uint64_t>(std::min<int64_t>(vocab, 128000));
  uint64_t state = seed ^ 0x5EEDB0A7C0FFEEull;
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    ids.push_back(static_cast<int32_t>((z ^ (z >> 31)) % range));
  }
  return ids;
}

std::filesystem::path find_source_dir() {
  std::vector<std::filesystem::path> starts;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  const auto cwd = std::filesystem::current_path(ec);
  if (!ec) starts.push_back(cwd);
  for (auto dir : starts) {
    for (; !dir.empty(); dir = dir.parent_path()) {
      if (std::filesystem::exists(dir / "bench" / "peer_hf.py", ec)) return dir;
      if (dir == dir.parent_path()) break;
    }
  }
  return {};
}

std::string git_commit_of(const std::filesystem::path& source_dir) {
  if (!source_dir.empty()) {
    const std::string commit = capture("git -C " + shell_quote(source_dir.string()) + " rev-parse HEAD 2>/dev/null");
    if (!commit.empty()) return commit;
  }
  const char* env = std::getenv("KERNELLLM_GIT_COMMIT");
  if (env == nullptr) return {};
  const std::string v = env;
  const bool hex = std::all_of(v.begin(), v.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  return hex && v.size() >= 7 && v.size() <= 40 ? v : std::string{};
}

Json kernelllm_environment() {
  Json env = Json::object();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && kv.rfind("KERNELLLM_", 0) == 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

Result<Json> describe_cuda_plan(const Device& device, const ModelConfig& config, DType dtype,
                                const std::string& plan_text, const std::vector<int64_t>& n) {
  KLLM_ASSIGN_OR_RETURN(const cuda::PlanChoices choices, cuda::plan_choices(plan_text));
  KLLM_ASSIGN_OR_RETURN(const GpuFacts facts, query_gpu(device.index));
  const cuda::GpuTraits gpu{facts.major, facts.minor, facts.sm_count, facts.smem_per_block};
  const cuda::KernelPlan plan(config, dtype, gpu, choices);
  const cuda::PassPlan prefill = plan.pass(kPrefillProbeTokens, 1, false, false);
  Json decode = Json::object();
  for (int64_t k : n) decode[std::to_string(k)] = plan.describe(k, k >= 2);
  const char* forms[] = {"row_tile", "row_tiles2", "head_rows"};
  return Json{{"text", cuda::plan_text(choices)},
              {"gpu", {{"compute_capability", std::to_string(gpu.major) + "." + std::to_string(gpu.minor)},
                       {"sm_count", gpu.sm_count},
                       {"smem_per_block", gpu.smem_per_block}}},
              {"hopper_features", plan.hopper()},
              {"prefill_attention", prefill.attention == cuda::AttentionKind::prefill
                                        ? forms[static_cast<int>(prefill.prefill)]
                                        : "split"},
              {"decode", decode}};
}

Json machine_facts(const Device& device) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  Json m = {
      {"cpu", cpu_model()},
      {"cpu_threads", std::thread::hardware_concurrency()},
      {"host", host},
      {"kernelllm_version", KERNELLLM_VERSION},
      {"git_commit", nullptr},
      {"gpu", nullptr},
      // The run's KERNELLLM_* variables (e.g. KERNELLLM_CUDA_PLAN=portable): what was measured.
      {"environment", kernelllm_environment()},
  };
  if (const std::string commit = git_commit_of(find_source_dir()); !commit.empty()) m["git_commit"] = commit;
  if (device.cuda) {
    Json g = {{"device", device.index}};
    if (auto facts = query_gpu(device.index); facts.ok()) {
      g["name"] = facts->name;
      g["driver_cuda_version"] = std::to_string(facts->driver_cuda_version / 1000) + "." +
                                 std::to_string(facts->driver_cuda_version % 1000 / 10);
      g["memory_total_bytes"] = facts->total_bytes;
    } else {
      g["error"] = facts.status().to_string();
    }
    const std::string driver = capture("nvidia-smi --query-gpu=driver_version --format=csv,noheader -i " +
                                       std::to_string(device.index) + " 2>/dev/null");
    g["driver_version"] = driver.empty() ? Json(nullptr) : Json(driver);
    m["gpu"] = g;
  }
  return m;
}

Result<Json> check_memory(const Device& device, uint64_t weights_bytes, uint64_t kv_bytes, uint64_t workspace_bytes,
                          int64_t max_n, int64_t tokens_per_sequence) {
  const uint64_t need = weights_bytes + kv_bytes + workspace_bytes;
  Json j = {{"weights_bytes", weights_bytes}, {"kv_bytes", kv_bytes}, {"workspace_bytes", workspace_bytes},
            {"required_bytes", need}, {"available_bytes", nullptr}, {"checked", false}};
  uint64_t available = 0;
  std::string where;
  if (device.cuda) {
    auto facts = query_gpu(device.index);
    if (!facts.ok()) {
      j["reason"] = facts.status().to_string();
      return j;
    }
    available = facts->free_bytes;
    where = "cuda:" + std::to_string(device.index) + " (" + facts->name + ") has " + gib(available) + " free";
  } else {
    available = mem_available_bytes();
    if (available == 0) {
      j["reason"] = "MemAvailable not found in /proc/meminfo";
      return j;
    }
    where = "the host has " + gib(available) + " available";
  }
  j["available_bytes"] = available;
  j["checked"] = true;
  if (need > available) {
    return error(ErrorCode::resource_exhausted,
                 "bench: does not fit: needs " + gib(need) + " (weights " + gib(weights_bytes) + " + KV for n = " +
                     std::to_string(max_n) + " × " + std::to_string(tokens_per_sequence) + " tokens " + gib(kv_bytes) +
                     " + workspace " + gib(workspace_bytes) + ") but " + where);
  }
  return j;
}

Json run_hf_peer(const BenchOptions& o, const std::string& config_json, const std::vector<int32_t>& prompt) {
  std::filesystem::path script = o.peer_script;
  if (script.empty()) {
    const auto src = find_source_dir();
    if (src.empty()) return Json{{"error", "bench/peer_hf.py not found above the executable or the working directory; pass --peer-script"}};
    script = src / "bench" / "peer_hf.py";
  }
  auto tmp = TempDir::create("kernelllm-bench-peer");
  if (!tmp.ok()) return Json{{"error", tmp.status().to_string()}};
  const auto dir = (*tmp)->path();
  {
    std::ofstream(dir / "config.json") << config_json;
    std::ofstream(dir / "prompt.json") << Json(prompt).dump();
  }
  std::string n_list;
  for (int64_t n : o.n) {
    if (!n_list.empty()) n_list += ',';
    n_list += std::to_string(n);
  }
  const std::string cmd = shell_quote(o.python) + " " + shell_quote(script.string()) + " --config " +
                          shell_quote((dir / "config.json").string()) + " --prompt-ids " +
                          shell_quote((dir / "prompt.json").string()) + " --new-tokens " + std::to_string(o.new_tokens) +
                          " --n " + n_list + " --dtype " + (o.dtype == DType::f16 ? "f16" : "bf16") + " --device " +
                          shell_quote(o.device) + " --seed " + std::to_string(o.seed) + " --warmup " +
                          std::to_string(o.warmup) + " --temperature " + std::to_string(o.temperature) + " --top-p " +
                          std::to_string(o.top_p) + " --top-k " + std::to_string(o.top_k) + " --out " +
                          shell_quote((dir / "peer.json").string()) + " > " +
                          shell_quote((dir / "peer.log").string()) + " 2>&1";
  const int rc = std::system(cmd.c_str());
  auto out = read_text_file(dir / "peer.json");
  if (rc != 0 || !out.ok()) {
    auto log = read_text_file(dir / "peer.log");
    std::string tail = log.ok() ? *log : std::string();
    if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
    return Json{{"error", "peer exited with status " + std::to_string(WIFEXITED(rc) ? WEXITSTATUS(rc) : rc)},
                {"command", cmd},
                {"log_tail", tail}};
  }
  auto parsed = parse_json(*out, "peer.json");
  if (!parsed.ok()) return Json{{"error", parsed.status().to_string()}};
  return *parsed;
}

}  // namespace kernelllm::bench

namespace kernelllm {

// The byte counts behind the achieved-bandwidth figures (bench.h).
uint64_t parameter_count(const ModelConfig& c) {
  const auto h = static_cast<uint64_t>(c.hidden_size), hd = static_cast<uint64_t>(c.head_dim),
             q = static_cast<uint64_t>(c.num_attention_heads) * hd,
             kv = static_cast<uint64_t>(c.num_key_value_heads) * hd, m = static_cast<uint64_t>(c.intermediate_size),
             v = static_cast<uint64_t>(c.vocab_size);
  const uint64_t per_layer = 2 * h + q * h + 2 * kv * h + h * q + 3 * m * h;
  return v * h * (c.tie_word_embeddings ? 1 : 2) + static_cast<uint64_t>(c.num_hidden_layers) * per_layer + h;
}

uint64_t decode_weight_bytes(const ModelConfig& c, size_t dtype_bytes) {
  uint64_t params = parameter_count(c);
  if (!c.tie_word_embeddings) params -= static_cast<uint64_t>(c.vocab_size) * static_cast<uint64_t>(c.hidden_size);
  return params * dtype_bytes;
}

uint64_t kv_bytes_per_token(const ModelConfig& c, size_t element_bytes) {
  return static_cast<uint64_t>(c.num_hidden_layers) * 2 * static_cast<uint64_t>(c.num_key_value_heads) *
         static_cast<uint64_t>(c.head_dim) * element_bytes;
}

}  // namespace kernelllm
