// kernelllm._native: a thin pybind11 layer over the C++ library — an Engine (model + CPU
// backend), tokenizer encode/decode, k-sample generation (GIL released; stream callbacks
// re-acquire it), optimize and the REPL over the Engine's backend, the verifier, and the prompt
// template functions. Options and reports cross as JSON text. Status errors become Python
// exceptions: not_found → FileNotFoundError, malformed input → ValueError, the rest → RuntimeError.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/cuda_backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/sampler.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/optimize.h"
#include "kernelllm/pipeline/prompt.h"
#include "kernelllm/pipeline/repl.h"

namespace py = pybind11;

namespace kernelllm {
namespace {

[[noreturn]] void throw_status(const Status& status) {
  const std::string msg = status.to_string();
  switch (status.code()) {
    case ErrorCode::not_found:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw py::error_already_set();
    case ErrorCode::invalid_argument:
    case ErrorCode::parse_error:
    case ErrorCode::unsupported:
    case ErrorCode::out_of_range:
      throw py::value_error(msg);
    default:
      throw std::runtime_error(msg);
  }
}

template <class T>
T unwrap(Result<T> result) {
  if (!result.ok()) throw_status(result.status());
  return std::move(result).value();
}

Json parse_options(const std::string& text, const char* what) {
  auto parsed = parse_json(text, what);
  if (!parsed.ok()) throw_status(parsed.status());
  return std::move(parsed).value();
}

// kernelllm.verify's keyword arguments (as JSON) → VerifyOptions; the Python side owns the defaults.
harness::VerifyOptions verify_options_from_json(const Json& j) {
  harness::VerifyOptions o;
  try {
    o.profile = j.value("profile", o.profile);
    o.kernelbench_tolerance = j.value("kernelbench_tolerance", o.kernelbench_tolerance);
    auto devices = harness::parse_devices(j.value("device", std::string("cpu")));
    if (!devices.ok()) throw_status(devices.status());
    o.devices = *devices;
    o.jobs = j.value("jobs", o.jobs);
    o.n_trials = j.value("trials", o.n_trials);
    o.sandbox = j.value("sandbox", o.sandbox);
    o.use_cache = j.value("cache", o.use_cache);
    o.cache_path = j.value("cache_path", o.cache_path);
    o.timing = j.value("timing", o.timing);
    o.time_compile = j.value("time_compile", o.time_compile);
    o.load_timeout_s = j.value("load_timeout_s", o.load_timeout_s);
    o.run_timeout_min_s = j.value("run_timeout_s", o.run_timeout_min_s);
    o.select = j.value("select", o.select);
    o.python = j.value("python", o.python);
    o.package_dir = j.value("package_dir", o.package_dir);
  } catch (const Json::exception& e) {
    throw py::value_error(std::string("verify options: ") + e.what());
  }
  return o;
}

// optimize's keyword arguments (as JSON) → OptimizeOptions.
OptimizeOptions optimize_options_from_json(const Json& j) {
  OptimizeOptions o;
  try {
    o.k = j.value("k", o.k);
    o.max_new_tokens = j.value("max_new_tokens", o.max_new_tokens);
    o.sampling.temperature = j.value("temperature", kKernelLLMTemperature);
    o.sampling.top_p = j.value("top_p", kKernelLLMTopP);
    o.sampling.top_k = j.value("top_k", 0);
    o.sampling.seed = j.value("seed", uint64_t{0});
    o.rounds = j.value("rounds", o.rounds);
    o.prompt_template = j.value("prompt_template", std::string(builtin_prompt_template()));
    o.work_dir = j.value("work_dir", std::string());
  } catch (const Json::exception& e) {
    throw py::value_error(std::string("optimize options: ") + e.what());
  }
  if (o.k < 1) throw py::value_error("k: expected at least 1 sample, found " + std::to_string(o.k));
  if (o.max_new_tokens < 1) {
    throw py::value_error("max_new_tokens: expected at least 1, found " + std::to_string(o.max_new_tokens));
  }
  if (o.rounds < 1) throw py::value_error("rounds: expected at least 1, found " + std::to_string(o.rounds));
  if (o.work_dir.empty()) throw py::value_error("work_dir: expected a directory path, found an empty one");
  if (Status s = validate(o.sampling); !s.ok()) throw_status(s);
  o.verify = verify_options_from_json(j.value("verify", Json::object()));
  return o;
}

// optimize() with the GIL released, then its result as JSON text: the full report plus one
// plain summary per candidate (what KernelLLM.optimize returns).
std::string run_optimize_json(const std::string& code, CompletionSource& source, const OptimizeOptions& options,
                              std::mutex* lock) {
  if (Status s = check_module_code(code); !s.ok()) throw_status(s.with_context("code"));
  Result<OptimizeResult> result = error(ErrorCode::internal, "not run");
  {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> guard;
    if (lock != nullptr) guard = std::unique_lock<std::mutex>(*lock);
    result = optimize(code, source, options);
  }
  if (!result.ok()) throw_status(result.status());
  Json candidates = Json::array();
  for (const OptimizeCandidate& c : result->candidates) {
    candidates.push_back({{"round", c.round},
                          {"sample", c.sample},
                          {"verdict", harness::verdict_name(c.result.verdict)},
                          {"rule", c.result.rule},
                          {"message", c.result.message},
                          {"speedup", c.result.speedup},
                          {"timing_meaningful", c.result.timing && c.result.timing->meaningful},
                          {"code", c.code},
                          {"extraction", c.extraction},
                          {"completion", c.completion},
                          {"path", c.file.string()}});
  }
  Json out = {{"report", result->to_json()},
              {"candidates", candidates},
              {"best", result->best ? Json(*result->best) : Json(nullptr)},
              {"selection_reason", result->selection_reason},
              {"failure_reasons", result->failure_reasons}};
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Completions written elsewhere (another model or system), in order, as one "generation".
class FixedSource final : public CompletionSource {
 public:
  explicit FixedSource(std::vector<std::string> texts) : texts_(std::move(texts)) {}
  Result<std::vector<std::string>> complete(const std::string&, int n, int, const SamplingParams&,
                                            const StreamCallback& on_text, GenerateStats*) override {
    if (static_cast<size_t>(n) != texts_.size()) {
      return error(ErrorCode::invalid_argument, "fixed completions: asked for " + std::to_string(n) + ", have " +
                                                    std::to_string(texts_.size()));
    }
    if (on_text) {
      for (size_t i = 0; i < texts_.size(); ++i) on_text(static_cast<int32_t>(i), texts_[i]);
    }
    return texts_;
  }
  std::string describe() const override { return "fixed"; }

 private:
  std::vector<std::string> texts_;
};

std::string verify_completions_json(const std::string& code, const std::vector<std::string>& completions,
                                    const std::string& options_json) {
  if (completions.empty()) throw py::value_error("completions: expected at least one, found none");
  Json j = parse_options(options_json, "verify_completions options");
  j["k"] = completions.size();
  j["rounds"] = 1;  // fixed texts cannot answer a refinement prompt
  FixedSource source(completions);
  return run_optimize_json(code, source, optimize_options_from_json(j), nullptr);
}

// One loaded model and its backend. Generation on one Engine is serialized by `mutex_`.
class Engine {
 public:
  // `device`: "cpu", "cuda" or "cuda:N" (the CLI's engine devices; open_engine_parts names the
  // cause when this build or machine has no CUDA).
  static std::unique_ptr<Engine> create(const std::string& model, const std::string& device, int threads) {
    EngineOptions options;
    options.model = model;
    options.device = device;
    options.threads = threads;
    Result<OpenedEngine> opened = error(ErrorCode::internal, "not opened");
    {
      py::gil_scoped_release release;
      opened = open_engine_parts(options);
    }
    return std::unique_ptr<Engine>(new Engine(model, device, unwrap(std::move(opened))));
  }

  std::string model_dir() const { return dir_.string(); }
  std::string device() const { return device_; }
  const Tokenizer& tokenizer() const { return *parts_.tokenizer; }
  std::vector<int32_t> stop_ids() const { return parts_.stop_ids; }

  std::pair<std::vector<Completion>, GenerateStats> generate(const std::variant<std::string, std::vector<int32_t>>& prompt,
                                                             int32_t n, int32_t max_new_tokens, float temperature,
                                                             float top_p, int32_t top_k, uint64_t seed,
                                                             const std::optional<py::function>& stream,
                                                             bool skip_special_tokens) {
    std::vector<int32_t> ids;
    if (const auto* text = std::get_if<std::string>(&prompt)) {
      ids = unwrap(parts_.tokenizer->encode(*text, /*add_special_tokens=*/true));
    } else {
      ids = std::get<std::vector<int32_t>>(prompt);
    }
    if (n < 1) throw py::value_error("n: expected at least 1, found " + std::to_string(n));
    if (max_new_tokens < 1) {
      throw py::value_error("max_new_tokens: expected at least 1, found " + std::to_string(max_new_tokens));
    }
    GenerateOptions options;
    options.num_samples = n;
    options.max_new_tokens = max_new_tokens;
    options.sampling = SamplingParams{temperature, top_p, top_k, seed};
    options.stop_ids = stop_ids();
    options.skip_special_tokens = skip_special_tokens;
    if (Status s = validate(options.sampling); !s.ok()) throw_status(s);

    // A Python exception in the callback cancels generation and is re-raised afterwards.
    std::optional<py::error_already_set> callback_error;
    StreamCallback on_text;
    if (stream) {
      on_text = [&](int32_t sample, std::string_view text) {
        py::gil_scoped_acquire gil;
        try {
          py::object r = (*stream)(sample, py::str(text.data(), text.size()));
          return r.is_none() || r.cast<bool>();
        } catch (py::error_already_set& e) {
          callback_error = std::move(e);
          return false;
        }
      };
    }
    GenerateStats stats;
    Result<std::vector<Completion>> result = std::vector<Completion>{};
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      result = kernelllm::generate(*parts_.backend, *parts_.tokenizer, ids, options, on_text, &stats);
    }
    if (callback_error) throw std::move(*callback_error);
    return {unwrap(std::move(result)), stats};
  }

  std::string optimize_json(const std::string& code, const std::string& options_json) {
    OptimizeOptions options = optimize_options_from_json(parse_options(options_json, "optimize options"));
    std::unique_ptr<CompletionSource> source = make_engine_source(*parts_.backend, *parts_.tokenizer, stop_ids(), describe());
    return run_optimize_json(code, *source, options, &mutex_);
  }

  // The C++ REPL on this process's stdin (fd 0) and stdout, GIL released.
  void run_repl(const std::string& options_json) {
    Json j = parse_options(options_json, "repl options");
    ReplOptions o;
    try {
      o.k = j.value("k", o.k);
      o.max_new_tokens = j.value("max_new_tokens", o.max_new_tokens);
      o.sampling.temperature = j.value("temperature", o.sampling.temperature);
      o.sampling.top_p = j.value("top_p", o.sampling.top_p);
      if (j.contains("seed") && !j["seed"].is_null()) o.seed = j["seed"].get<uint64_t>();
      o.rounds = j.value("rounds", o.rounds);
      o.prompt_template = j.value("prompt_template", o.prompt_template);
      o.work_root = j.value("work_dir", std::string());
      o.verify_enabled = j.value("verify_enabled", o.verify_enabled);
      o.interactive = j.value("interactive", ::isatty(STDIN_FILENO) == 1);
    } catch (const Json::exception& e) {
      throw py::value_error(std::string("repl options: ") + e.what());
    }
    if (o.k < 1) throw py::value_error("k: expected at least 1 sample, found " + std::to_string(o.k));
    if (o.verify_enabled) o.verify = verify_options_from_json(j.value("verify", Json::object()));
    std::unique_ptr<CompletionSource> source = make_engine_source(*parts_.backend, *parts_.tokenizer, stop_ids(), describe());
    std::unique_ptr<LineReader> in = make_fd_line_reader(STDIN_FILENO);
    Status status;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      status = kernelllm::run_repl(*source, o, *in, std::cout);
      std::cout.flush();
    }
    if (!status.ok()) throw_status(status);
  }

 private:
  std::string describe() const { return parts_.description; }
  Engine(std::filesystem::path dir, std::string device, OpenedEngine parts)
      : dir_(std::move(dir)), device_(std::move(device)), parts_(std::move(parts)) {}

  std::filesystem::path dir_;
  std::string device_;
  OpenedEngine parts_;  // weights, tokenizer, backend (destroyed first)
  std::mutex mutex_;
};

// The verifier behind kernelllm.verify(): options and report travel as JSON text so that the
// Python side owns the keyword defaults; the GIL is released while candidates run.
std::string verify_json(const std::string& problem, const std::vector<std::string>& candidates, const std::string& options_json) {
  harness::VerifyOptions o = verify_options_from_json(parse_options(options_json, "verify options"));
  Result<harness::VerifyReport> rep = error(ErrorCode::internal, "not run");
  {
    py::gil_scoped_release release;
    rep = harness::verify(problem, candidates, o);
  }
  if (!rep.ok()) throw_status(rep.status());
  return rep->to_json().dump();
}

}  // namespace
}  // namespace kernelllm

PYBIND11_MODULE(_native, m) {
  using namespace kernelllm;
  m.doc() = "kernelllm native engine (C++): model loading, tokenizer, generation, prompt templates";
  m.attr("__version__") = KERNELLLM_VERSION;
  m.attr("DEFAULT_TEMPERATURE") = kKernelLLMTemperature;  // KernelLLM's sampling defaults (sampler.h)
  m.attr("DEFAULT_TOP_P") = kKernelLLMTopP;
  m.def("has_cuda", [] { return cuda_backend_built(); }, "Whether the CUDA backend was built in.");
  m.def("verify_json", &verify_json, py::arg("problem"), py::arg("candidates"), py::arg("options_json"),
        "Runs the verifier; options and the returned report are JSON text (see kernelllm.verify).");

  m.def("verify_completions_json", &verify_completions_json, py::arg("code"), py::arg("completions"),
        py::arg("options_json"),
        "Extracts, verifies and ranks completions written elsewhere; options and result are JSON text.");
  m.def("default_module_code", [] { return std::string(default_module_code()); },
        "The built-in example module the REPL uses for an empty input.");
  m.def(
      "check_module_code",
      [](const std::string& code) {
        if (Status s = check_module_code(code); !s.ok()) throw_status(s);
      },
      py::arg("code"), "Raises ValueError unless code has class Model, get_inputs and get_init_inputs.");

  m.def("builtin_prompt_template", [] { return std::string(builtin_prompt_template()); });
  m.def("extract_prompt_template",
        [](const std::string& source, const std::string& what) { return unwrap(extract_prompt_template(source, what)); },
        py::arg("source"), py::arg("what") = "kernelllm.py",
        "PROMPT_TEMPLATE's value from Python source text (string literals only).");
  m.def(
      "load_prompt_template",
      [](const std::string& model_dir, const std::string& override_file) {
        PromptTemplate t = unwrap(load_prompt_template(model_dir, override_file));
        return std::make_pair(t.text, t.source);
      },
      py::arg("model_dir") = "", py::arg("override_file") = "",
      "(text, source): the override file, else model_dir/kernelllm.py's PROMPT_TEMPLATE, else built-in.");
  m.def("format_triton_prompt",
        [](const std::string& tmpl, const std::string& code) { return unwrap(format_triton_prompt(tmpl, code)); },
        py::arg("template"), py::arg("code"), "template.format(code) with Python's rules for one field.");
  m.def("resolve_model_path",
        [](const std::string& name, const std::string& revision) { return unwrap(resolve_model_path(name, revision)).string(); },
        py::arg("name_or_path"), py::arg("revision") = "",
        "A model directory, or the complete snapshot of an HF id in the HF cache (never downloads).");

  py::class_<Completion>(m, "Completion")
      .def_readonly("text", &Completion::text)
      .def_readonly("tokens", &Completion::tokens)
      .def_property_readonly("finish", [](const Completion& c) { return std::string(finish_reason_name(c.finish)); })
      .def("__repr__", [](const Completion& c) {
        return "Completion(tokens=" + std::to_string(c.tokens.size()) + ", finish=" +
               std::string(finish_reason_name(c.finish)) + ")";
      });
  py::class_<GenerateStats>(m, "GenerateStats")
      .def_readonly("prompt_tokens", &GenerateStats::prompt_tokens)
      .def_readonly("generated_tokens", &GenerateStats::generated_tokens)
      .def_readonly("prefill_ms", &GenerateStats::prefill_ms)
      .def_readonly("decode_ms", &GenerateStats::decode_ms);

  py::class_<Engine>(m, "Engine")
      .def(py::init(&Engine::create), py::arg("model"), py::arg("device") = "cpu",
           py::arg("threads") = 0, "Loads a model directory or a locally cached HF id onto a backend.")
      .def_property_readonly("model_dir", &Engine::model_dir)
      .def_property_readonly("device", &Engine::device)
      .def_property_readonly("stop_ids", &Engine::stop_ids)
      .def(
          "encode",
          [](const Engine& e, const std::string& text, bool add_special_tokens) {
            return unwrap(e.tokenizer().encode(text, add_special_tokens));
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Engine& e, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return unwrap(e.tokenizer().decode(ids, skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def("generate", &Engine::generate, py::arg("prompt"), py::arg("n") = 1, py::arg("max_new_tokens") = 2048,
           py::arg("temperature") = kKernelLLMTemperature, py::arg("top_p") = kKernelLLMTopP, py::arg("top_k") = 0, py::arg("seed") = 0,
           py::arg("stream") = py::none(), py::arg("skip_special_tokens") = true,
           "(completions, stats) for n samples of a prompt (text, BOS added; or token ids). "
           "stream(sample_index, text) is called as text is produced; returning False cancels.")
      .def("optimize_json", &Engine::optimize_json, py::arg("code"), py::arg("options_json"),
           "Generates, extracts, verifies and ranks k candidates; options and result are JSON text.")
      .def("run_repl", &Engine::run_repl, py::arg("options_json"),
           "The interactive REPL on stdin/stdout (see kernelllm.KernelLLM.run_repl).");
}
