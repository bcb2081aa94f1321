#include "engine/cuda_plan.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <vector>

namespace kernelllm::cuda {
namespace {

// Band GEMM: where every SM gets a band of 8 tiles of 16 rows or more (of Llama-3.1-8B's layer
// matrices, gate_up). Staged GEMM: where each block has 128 (band, stage) units or more (the
// vocabulary projection). docs/cuda-engine.md, Projections.
constexpr int64_t kBandMinTilesPerSm = 8;
constexpr int64_t kStagedMinUnitsPerBlock = 128;
// The portable plan's shared memory per block: compute capability 8.6 and 8.9 (99 KB).
constexpr int64_t kPortableSmemPerBlock = 99 * 1024;

std::string_view wide_name(PlanChoices::Wide w) {
  switch (w) {
    case PlanChoices::Wide::off: return "off";
    case PlanChoices::Wide::all: return "all";
    default: return "chosen";
  }
}

// The keys of a plan text: how each reads and writes its field.
struct Key {
  std::string_view name;
  std::function<bool(PlanChoices&, std::string_view)> set;  // false: a bad value
  std::function<std::string(const PlanChoices&)> get;
  std::string_view values;
};

bool parse_bool(std::string_view v, bool& out) {
  if (v == "1" || v == "on") {
    out = true;
  } else if (v == "0" || v == "off") {
    out = false;
  } else {
    return false;
  }
  return true;
}

bool parse_int(std::string_view v, int64_t lo, int64_t hi, int64_t& out) {
  if (v.empty() || v.size() > 10) return false;
  int64_t x = 0;
  for (char ch : v) {
    if (ch < '0' || ch > '9') return false;
    x = x * 10 + (ch - '0');
  }
  if (x < lo || x > hi) return false;
  out = x;
  return true;
}

Key bool_key(std::string_view name, bool PlanChoices::*field) {
  return {name, [field](PlanChoices& c, std::string_view v) { return parse_bool(v, c.*field); },
          [field](const PlanChoices& c) { return std::string(c.*field ? "1" : "0"); }, "0 or 1"};
}

Key wide_key(std::string_view name, PlanChoices::Wide PlanChoices::*field) {
  return {name,
          [field](PlanChoices& c, std::string_view v) {
            if (v == "off" || v == "0") {
              c.*field = PlanChoices::Wide::off;
            } else if (v == "chosen" || v == "1") {
              c.*field = PlanChoices::Wide::chosen;
            } else if (v == "all") {
              c.*field = PlanChoices::Wide::all;
            } else {
              return false;
            }
            return true;
          },
          [field](const PlanChoices& c) { return std::string(wide_name(c.*field)); }, "off, chosen or all"};
}

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      bool_key("gemv", &PlanChoices::gemv),
      bool_key("skinny", &PlanChoices::skinny),
      {"skinny_tokens", [](PlanChoices& c, std::string_view v) { return parse_int(v, 1, kSkinnyMaxTokens, c.skinny_tokens); },
       [](const PlanChoices& c) { return std::to_string(c.skinny_tokens); }, "1..32"},
      wide_key("staged", &PlanChoices::staged),
      wide_key("band", &PlanChoices::band),
      {"band_parts",
       [](PlanChoices& c, std::string_view v) {
         if (v == "auto") {
           c.band_parts = -1;
           return true;
         }
         int64_t x = 0;
         if (!parse_int(v, 0, 8, x)) return false;
         c.band_parts = static_cast<int>(x);
         return true;
       },
       [](const PlanChoices& c) { return c.band_parts < 0 ? std::string("auto") : std::to_string(c.band_parts); },
       "auto or 0..8"},
      bool_key("lt_tuned", &PlanChoices::lt_tuned),
      bool_key("fused_swiglu", &PlanChoices::fused_swiglu),
      bool_key("fused_rope", &PlanChoices::fused_rope),
      bool_key("cascade", &PlanChoices::cascade),
      bool_key("mma_suffix", &PlanChoices::mma_suffix),
      bool_key("tma_suffix", &PlanChoices::tma_suffix),
      bool_key("o_prefetch", &PlanChoices::o_prefetch),
      bool_key("prefill_head_rows", &PlanChoices::prefill_head_rows),
      bool_key("kv_evict_first", &PlanChoices::kv_evict_first),
      bool_key("weights_evict_first", &PlanChoices::weights_evict_first),
      bool_key("pdl", &PlanChoices::pdl),
      bool_key("chain", &PlanChoices::chain),
      bool_key("device_sampling", &PlanChoices::device_sampling),
  };
  return k;
}

std::string key_list() {
  std::string s = "portable";
  for (const Key& k : keys()) s += ", " + std::string(k.name) + "=" + std::string(k.values);
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<PlanChoices> parse_plan_choices(std::string_view text) {
  PlanChoices c;
  text = trim(text);
  if (text.empty() || text == "auto") return c;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty() || item == "auto") continue;
    if (item == "portable") {
      c.portable = true;
      continue;
    }
    const size_t eq = item.find('=');
    const std::string_view name = trim(item.substr(0, eq));
    const auto k = std::find_if(keys().begin(), keys().end(), [&](const Key& key) { return key.name == name; });
    if (k == keys().end() || eq == std::string_view::npos) {
      return error(ErrorCode::invalid_argument, "cuda plan: unknown item '" + std::string(item) + "'; expected " +
                                                    key_list() + " (comma-separated)");
    }
    const std::string_view value = trim(item.substr(eq + 1));
    if (!k->set(c, value)) {
      return error(ErrorCode::invalid_argument, "cuda plan: " + std::string(name) + " expects " +
                                                    std::string(k->values) + ", found '" + std::string(value) + "'");
    }
  }
  return c;
}

std::string plan_text(const PlanChoices& choices) {
  const PlanChoices defaults;
  std::string s = choices.portable ? "portable" : "";
  for (const Key& k : keys()) {
    const std::string v = k.get(choices);
    if (v == k.get(defaults)) continue;
    if (!s.empty()) s += ",";
    s += std::string(k.name) + "=" + v;
  }
  return s.empty() ? "auto" : s;
}

Result<PlanChoices> plan_choices_from_env() {
  const char* v = std::getenv("KERNELLLM_CUDA_PLAN");
  const std::string_view text = v == nullptr ? std::string_view{} : trim(v);
  if (text.empty() || text == "auto" || text == "portable") return parse_plan_choices(text);
  return error(ErrorCode::invalid_argument,
               "KERNELLLM_CUDA_PLAN: expected auto or portable, found '" + std::string(text) +
                   "' (other plan choices are for bench programs: kernelllm bench --cuda-plan)");
}

Result<PlanChoices> plan_choices(std::string_view text) {
  return text.empty() ? plan_choices_from_env() : parse_plan_choices(text);
}

std::string_view proj_kernel_name(ProjKernel kernel) {
  switch (kernel) {
    case ProjKernel::gemv: return "gemv";
    case ProjKernel::skinny: return "skinny";
    case ProjKernel::staged: return "staged";
    case ProjKernel::band: return "band";
    case ProjKernel::band_parts: return "band_parts";
    default: return "cublaslt";
  }
}

KernelPlan::KernelPlan(const ModelConfig& config, DType dtype, const GpuTraits& gpu, const PlanChoices& choices)
    : dtype_(dtype),
      gpu_(gpu),
      choices_(choices),
      hopper_(gpu.major >= 9 && !choices.portable && gpu.smem_per_block >= kBandSmemBytes),
      hidden_(config.hidden_size),
      inter_(config.intermediate_size),
      vocab_(config.vocab_size),
      q_dim_(config.num_attention_heads * config.head_dim),
      kv_dim_(config.num_key_value_heads * config.head_dim),
      head_dim_(config.head_dim),
      group_(config.num_key_value_heads > 0 ? config.num_attention_heads / config.num_key_value_heads : 1),
      smem_per_block_(choices.portable ? std::min(gpu.smem_per_block, kPortableSmemPerBlock) : gpu.smem_per_block) {}

bool KernelPlan::staged_possible() const { return hopper_ && choices_.staged != PlanChoices::Wide::off; }

bool KernelPlan::band_parts_possible() const {
  return hopper_ && choices_.band != PlanChoices::Wide::off && choices_.band_parts != 0;
}

bool KernelPlan::cascade_possible() const {
  return choices_.cascade && shared_prefix_supported(dtype_, head_dim_, group_);
}

bool KernelPlan::staged_serves(int64_t rows, int64_t cols, int64_t n) const {
  // Past the skinny GEMM's tokens, up to its 32, and only where each block has a long run of
  // units (it pays ~13 us a kernel to start).
  return staged_possible() && n > choices_.skinny_tokens && staged_supported(dtype_, cols, n) &&
         (choices_.staged == PlanChoices::Wide::all ||
          staged_units_per_block(rows, cols, gpu_.sm_count) >= kStagedMinUnitsPerBlock);
}

bool KernelPlan::band_serves(int64_t rows, int64_t cols, int64_t n) const {
  // On the smaller matrices the first copies' latency and the reduction over clusters cost more
  // than cuBLASLt's kernels (k = 20: 7.07 against 6.62 ms a step with it on every projection).
  return hopper_ && choices_.band != PlanChoices::Wide::off && n > choices_.skinny_tokens &&
         band_supported(dtype_, cols, n) && !staged_serves(rows, cols, n) &&
         (choices_.band == PlanChoices::Wide::all || rows >= kBandMinTilesPerSm * 16 * gpu_.sm_count);
}

ProjPlan KernelPlan::projection(int64_t rows, int64_t cols, int64_t n) const {
  ProjPlan p;
  if (staged_serves(rows, cols, n)) {
    p.kernel = ProjKernel::staged;
  } else if (band_serves(rows, cols, n)) {
    p.kernel = ProjKernel::band;
  } else if (choices_.skinny && n >= 2 && n <= choices_.skinny_tokens && skinny_supported(dtype_, cols, n)) {
    // One token is the GEMV's. The skinny GEMM beats cuBLASLt from 2 to 16 tokens; at 20 it is
    // slower end to end on the H100 (7.43 against 7.26 ms a step).
    p.kernel = ProjKernel::skinny;
  } else if (choices_.gemv && n == 1 && gemv_supported(dtype_, cols, n)) {
    // The GEMV beats cuBLASLt at one token only (from two, cuBLASLt is faster on the H100).
    p.kernel = ProjKernel::gemv;
  }
  return p;
}

ProjPlan KernelPlan::layer_proj(Layer which, int64_t rows, int64_t cols, int64_t n) const {
  if (which == Layer::gate_up) {
    ProjPlan p = projection(rows, cols, n);
    p.swiglu = choices_.fused_swiglu && (p.kernel == ProjKernel::gemv || p.kernel == ProjKernel::band);
    return p;
  }
  // qkv, o and down past the skinny GEMM's tokens, where neither the staged nor the band GEMM
  // serves: the band GEMM's parts form (runs of up to 16 tiles split over several blocks'
  // columns; the consumer adds the parts).
  if (band_parts_possible() && n > choices_.skinny_tokens && band_supported(dtype_, cols, n) &&
      !staged_serves(rows, cols, n) && !band_serves(rows, cols, n)) {
    return ProjPlan{ProjKernel::band_parts, std::max(choices_.band_parts, 0), false};
  }
  return projection(rows, cols, n);
}

PassPlan KernelPlan::pass(int64_t n, int64_t q_blocks, bool single_token, bool cascade) const {
  PassPlan p;
  p.qkv = layer_proj(Layer::qkv, q_dim_ + 2 * kv_dim_, hidden_, n);
  p.o = layer_proj(Layer::o, hidden_, q_dim_, n);
  p.gate_up = layer_proj(Layer::gate_up, 2 * inter_, hidden_, n);
  p.down = layer_proj(Layer::down, hidden_, inter_, n);
  p.lm_head = projection(vocab_, hidden_, n);
  p.kv_evict_first = choices_.kv_evict_first;
  if (q_blocks > 0 && prefill_attention_supported(dtype_, head_dim_, group_)) {
    // Head rows for groups of 4 (Llama-3's), else two row tiles where they serve; each only
    // where its shared memory fits the GPU (head rows do not on compute capability 8.6 / 8.9).
    const auto fits = [&](PrefillKernel k) {
      return prefill_kernel_serves(k, group_) &&
             static_cast<int64_t>(prefill_smem_bytes(k, head_dim_, group_)) <= smem_per_block_;
    };
    if (group_ == 4 && choices_.prefill_head_rows && fits(PrefillKernel::head_rows)) {
      p.prefill = PrefillKernel::head_rows;
      p.attention = AttentionKind::prefill;
    } else if (fits(PrefillKernel::row_tiles2)) {
      p.prefill = PrefillKernel::row_tiles2;
      p.attention = AttentionKind::prefill;
    } else if (fits(PrefillKernel::row_tile)) {
      p.prefill = PrefillKernel::row_tile;
      p.attention = AttentionKind::prefill;
    }
  } else if (cascade && single_token && cascade_possible()) {
    p.attention = AttentionKind::cascade;
    p.mma_suffix = choices_.mma_suffix && suffix_mma_supported(dtype_, head_dim_, group_);
    // Only where the band parts stream qkv (17..32 tokens): beside the skinny GEMM's register
    // loads the early bulk copies cost far more than they save (k = 10: 6.61 against 6.12 ms).
    p.tma_suffix = p.mma_suffix && choices_.tma_suffix && p.qkv.kernel == ProjKernel::band_parts;
    p.o_prefetch = choices_.o_prefetch && p.o.kernel == ProjKernel::band_parts;
  }
  // The fold reads one qkv array (not qkv's parts) and is not in the tensor-core kernels.
  p.fused_rope = choices_.fused_rope && single_token && p.attention != AttentionKind::prefill && !p.mma_suffix &&
                 p.qkv.kernel != ProjKernel::band_parts;
  return p;
}

std::string KernelPlan::describe(int64_t n, bool cascade) const {
  const PassPlan p = pass(n, 0, true, cascade);
  auto proj = [](std::string_view name, const ProjPlan& pp) {
    std::string s = std::string(name) + " " + std::string(proj_kernel_name(pp.kernel));
    if (pp.swiglu) s += "+swiglu";
    return s;
  };
  std::string attention = p.attention == AttentionKind::cascade ? "cascade" : "split";
  if (p.mma_suffix) attention += p.tma_suffix ? " (own positions: mma, tma)" : " (own positions: mma)";
  if (p.fused_rope) attention += " (rope folded)";
  return proj("qkv", p.qkv) + ", " + proj("o", p.o) + ", " + proj("gate_up", p.gate_up) + ", " + proj("down", p.down) +
         ", " + proj("lm_head", p.lm_head) + ", attention " + attention;
}

}  // namespace kernelllm::cuda
