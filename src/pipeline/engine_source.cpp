// CompletionSources over our engine: a non-owning one over a caller's backend and tokenizer,
// and open_engine(), which loads a model (or makes random weights of a named shape) on the CPU
// or CUDA backend and keeps everything the backend needs alive beside it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernelllm/base/device.h"
#include "kernelllm/base/file.h"
#include "kernelllm/engine/cuda_backend.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/engine/random_weights.h"
#include "kernelllm/pipeline/optimize.h"

namespace kernelllm {
namespace {

class EngineSource final : public CompletionSource {
 public:
  EngineSource(Backend& backend, const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, std::string description)
      : backend_(&backend), tokenizer_(&tokenizer), stop_ids_(std::move(stop_ids)), description_(std::move(description)) {}

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                            const SamplingParams& sampling, const StreamCallback& on_text,
                                            GenerateStats* stats) override {
    return complete_each(prompt, n, max_new_tokens, sampling, on_text, {}, stats);
  }

  Result<std::vector<std::string>> complete_each(const std::string& prompt, int n, int max_new_tokens,
                                                 const SamplingParams& sampling, const StreamCallback& on_text,
                                                 const CompletionDone& on_done, GenerateStats* stats) override {
    if (n < 1) return error(ErrorCode::invalid_argument, "expected at least 1 sample, found " + std::to_string(n));
    // BOS added by the tokenizer's post-processor, as HF's encode() and `kernelllm generate` do.
    KLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_->encode(prompt, /*add_special_tokens=*/true));
    GenerateOptions options;
    options.num_samples = n;
    options.max_new_tokens = max_new_tokens;
    options.sampling = sampling;
    options.stop_ids = stop_ids_;
    options.skip_special_tokens = true;
    SampleDoneCallback done;
    if (on_done) done = [&](int32_t i, const Completion& c) { on_done(i, c.text); };
    KLLM_ASSIGN_OR_RETURN(std::vector<Completion> completions,
                          generate(*backend_, *tokenizer_, ids, options, on_text, stats, done));
    std::vector<std::string> texts;
    texts.reserve(completions.size());
    for (Completion& c : completions) texts.push_back(std::move(c.text));
    return texts;
  }

  std::string describe() const override { return description_; }

 private:
  Backend* backend_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> stop_ids_;
  std::string description_;
};

// Owns an opened engine's parts and a source over them.
class OwnedEngineSource final : public CompletionSource {
 public:
  explicit OwnedEngineSource(OpenedEngine parts) : parts_(std::move(parts)) {
    source_ = make_engine_source(*parts_.backend, *parts_.tokenizer, parts_.stop_ids, parts_.description);
  }

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                            const SamplingParams& sampling, const StreamCallback& on_text,
                                            GenerateStats* stats) override {
    return source_->complete(prompt, n, max_new_tokens, sampling, on_text, stats);
  }
  Result<std::vector<std::string>> complete_each(const std::string& prompt, int n, int max_new_tokens,
                                                 const SamplingParams& sampling, const StreamCallback& on_text,
                                                 const CompletionDone& on_done, GenerateStats* stats) override {
    return source_->complete_each(prompt, n, max_new_tokens, sampling, on_text, on_done, stats);
  }
  std::string describe() const override { return source_->describe(); }

 private:
  OpenedEngine parts_;
  std::unique_ptr<CompletionSource> source_;  // declared last: destroyed before the parts
};

struct DeviceChoice {
  bool cuda = false;
  int index = 0;
};

Result<DeviceChoice> parse_engine_device(const std::string& device) {
  KLLM_ASSIGN_OR_RETURN(DeviceSpec d, parse_device(device, "engine device"));
  return DeviceChoice{d.cuda, d.index_or_0()};
}

Result<DType> parse_engine_dtype(const std::string& dtype) {
  if (dtype == "bf16") return DType::bf16;
  if (dtype == "fp16" || dtype == "f16") return DType::f16;
  return error(ErrorCode::invalid_argument, "engine dtype: expected bf16 or fp16, found \"" + dtype + "\"");
}

Status require_cuda_build() {
  if (cuda_backend_built()) return {};
  return error(ErrorCode::unsupported,
               "--device cuda: this kernelllm was built without the CUDA backend (no CUDA toolkit with cuBLASLt was "
               "found at build time); use --device cpu or rebuild on a machine with CUDA");
}

std::vector<int32_t> stop_ids_of(const GenerationConfig& generation, const ModelConfig& config) {
  return generation.eos_token_ids.empty() ? config.eos_token_ids : generation.eos_token_ids;
}

}  // namespace

std::unique_ptr<CompletionSource> make_engine_source(Backend& backend, const Tokenizer& tokenizer,
                                                     std::vector<int32_t> stop_ids, std::string description) {
  return std::make_unique<EngineSource>(backend, tokenizer, std::move(stop_ids), std::move(description));
}

double engine_memory_fraction(const std::string& engine_device, const std::vector<std::string>& verify_devices,
                              double requested) {
  if (requested > 0.0) return requested;
  auto device = parse_engine_device(engine_device);
  if (!device.ok() || !device->cuda) return 0.0;
  const std::string mine = "cuda:" + std::to_string(device->index);
  for (const std::string& v : verify_devices) {
    if (v == "cuda" || v == mine) return kSharedGpuMemoryFraction;
  }
  return 0.0;
}

Result<std::unique_ptr<CompletionSource>> open_engine(const EngineOptions& options) {
  KLLM_ASSIGN_OR_RETURN(OpenedEngine parts, open_engine_parts(options));
  return std::unique_ptr<CompletionSource>(std::make_unique<OwnedEngineSource>(std::move(parts)));
}

Result<OpenedEngine> open_engine_parts(const EngineOptions& options) {
  KLLM_ASSIGN_OR_RETURN(DeviceChoice device, parse_engine_device(options.device));
  if (!(options.gpu_memory_fraction >= 0.0 && options.gpu_memory_fraction <= 1.0)) {
    return error(ErrorCode::invalid_argument, "GPU memory fraction: expected a value in (0, 1], found " +
                                                  std::to_string(options.gpu_memory_fraction));
  }
  KLLM_ASSIGN_OR_RETURN(DType dtype, parse_engine_dtype(options.dtype));
  if (device.cuda) KLLM_RETURN_IF_ERROR(require_cuda_build());
  // Holds what the backend reads (the weights, a temporary checkpoint) until it is gone.
  struct Storage {
    std::unique_ptr<TempDir> temp;
    std::unique_ptr<WeightStore> weights;
  };
  auto owned = std::make_shared<Storage>();
  OpenedEngine out;
  ModelConfig config;
  std::vector<int32_t> stop_ids;
  std::string description;

  if (options.random_config.empty()) {
    KLLM_ASSIGN_OR_RETURN(LoadedModel model, load_model(options.model));
    config = model.config;
    stop_ids = stop_ids_of(model.generation, model.config);
    description = options.device + ":" + model.dir.string();
    out.tokenizer = std::make_unique<Tokenizer>(std::move(model.tokenizer));
    owned->weights = std::move(model.weights);
  } else {
    // The shape's weights, the tokenizer (and generation config, when present) of `model`.
    KLLM_ASSIGN_OR_RETURN(std::filesystem::path dir, resolve_model_path(options.model));
    KLLM_ASSIGN_OR_RETURN(std::string config_json, named_config_json(options.random_config));
    KLLM_ASSIGN_OR_RETURN(config, ModelConfig::from_json(config_json));
    KLLM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_file(dir / "tokenizer.json"));
    if (tokenizer.vocab_size() > config.vocab_size) {
      return error(ErrorCode::invalid_argument,
                   "random weights \"" + options.random_config + "\": expected a tokenizer with at most " +
                       std::to_string(config.vocab_size) + " ids (the shape's vocab_size), found " +
                       std::to_string(tokenizer.vocab_size()) + " in " + (dir / "tokenizer.json").string());
    }
    KLLM_ASSIGN_OR_RETURN(GenerationConfig generation, load_generation_config(dir, config));
    stop_ids = stop_ids_of(generation, config);
    description = options.device + ":random " + options.random_config + " (seed " + std::to_string(options.random_seed) +
                  ", tokenizer " + dir.string() + ")";
    out.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
    if (!device.cuda) {
      // The CPU backend reads weights from a checkpoint: write a seeded one and mmap it.
      KLLM_ASSIGN_OR_RETURN(owned->temp, TempDir::create("kernelllm-random-weights"));
      KLLM_RETURN_IF_ERROR(write_random_checkpoint(owned->temp->path(), config_json, dtype, options.random_seed));
      KLLM_ASSIGN_OR_RETURN(WeightStore store, WeightStore::open(owned->temp->path()));
      owned->weights = std::make_unique<WeightStore>(std::move(store));
    }
  }

  if (device.cuda) {
    CudaBackendOptions co;
    co.device = device.index;
    co.dtype = dtype;
    co.memory_fraction = options.gpu_memory_fraction;
    if (owned->weights) {
      KLLM_ASSIGN_OR_RETURN(out.backend, make_cuda_backend(config, *owned->weights, co));
      owned->weights.reset();  // uploaded; the mmap is no longer needed
    } else {
      KLLM_ASSIGN_OR_RETURN(out.backend, make_cuda_backend_random(config, options.random_seed, co));
    }
  } else {
    CpuBackendOptions co;
    co.num_threads = options.threads;
    KLLM_ASSIGN_OR_RETURN(out.backend, make_cpu_backend(config, *owned->weights, co));
  }
  if (owned->weights || owned->temp) out.storage = std::move(owned);
  out.stop_ids = std::move(stop_ids);
  out.description = std::move(description);
  return out;
}

}  // namespace kernelllm
