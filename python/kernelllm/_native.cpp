// kernelllm._native: a thin pybind11 layer over the C++ library — an Engine (model + CPU
// backend), tokenizer encode/decode, k-sample generation (GIL released; stream callbacks
// re-acquire it) and the prompt template functions. Status errors become Python exceptions:
// not_found → FileNotFoundError, malformed input → ValueError, the rest → RuntimeError.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernelllm/engine/backend.h"
#include "kernelllm/engine/generator.h"
#include "kernelllm/engine/model.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/prompt.h"

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

// One loaded model and its backend. Generation on one Engine is serialized by `mutex_`.
class Engine {
 public:
  static std::unique_ptr<Engine> create(const std::string& model, const std::string& device, int threads) {
    if (device == "cuda") {
      throw std::runtime_error(
          "device 'cuda': this kernelllm was built without the CUDA backend (no CUDA toolkit at build "
          "time); use device='cpu' or rebuild on a machine with CUDA");
    }
    if (device != "cpu") throw py::value_error("device: expected 'cpu' or 'cuda', found '" + device + "'");
    // Heap-held so the backend may keep references into it (config, weights).
    auto loaded = std::make_unique<LoadedModel>(unwrap(load_model(model)));
    CpuBackendOptions options;
    options.num_threads = threads;
    std::unique_ptr<Backend> backend = unwrap(make_cpu_backend(loaded->config, *loaded->weights, options));
    return std::unique_ptr<Engine>(new Engine(std::move(loaded), std::move(backend)));
  }

  std::string model_dir() const { return model_->dir.string(); }
  std::string device() const { return "cpu"; }
  const Tokenizer& tokenizer() const { return model_->tokenizer; }
  std::vector<int32_t> stop_ids() const {
    return model_->generation.eos_token_ids.empty() ? model_->config.eos_token_ids : model_->generation.eos_token_ids;
  }

  std::pair<std::vector<Completion>, GenerateStats> generate(const std::variant<std::string, std::vector<int32_t>>& prompt,
                                                             int32_t n, int32_t max_new_tokens, float temperature,
                                                             float top_p, int32_t top_k, uint64_t seed,
                                                             const std::optional<py::function>& stream,
                                                             bool skip_special_tokens) {
    std::vector<int32_t> ids;
    if (const auto* text = std::get_if<std::string>(&prompt)) {
      ids = unwrap(model_->tokenizer.encode(*text, /*add_special_tokens=*/true));
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
      result = kernelllm::generate(*backend_, model_->tokenizer, ids, options, on_text, &stats);
    }
    if (callback_error) throw std::move(*callback_error);
    return {unwrap(std::move(result)), stats};
  }

 private:
  Engine(std::unique_ptr<LoadedModel> model, std::unique_ptr<Backend> backend)
      : model_(std::move(model)), backend_(std::move(backend)) {}

  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<Backend> backend_;
  std::mutex mutex_;
};

// The verifier behind kernelllm.verify(): options and report travel as JSON text so that the
// Python side owns the keyword defaults; the GIL is released while candidates run.
std::string verify_json(const std::string& problem, const std::vector<std::string>& candidates, const std::string& options_json) {
  auto parsed = parse_json(options_json, "verify options");
  if (!parsed.ok()) throw_status(parsed.status());
  const Json& j = *parsed;
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
  m.def("has_cuda", [] { return false; }, "Whether the CUDA backend was built in.");
  m.def("verify_json", &verify_json, py::arg("problem"), py::arg("candidates"), py::arg("options_json"),
        "Runs the verifier; options and the returned report are JSON text (see kernelllm.verify).");

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
        [](const std::string& name) { return unwrap(resolve_model_path(name)).string(); }, py::arg("name_or_path"));

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
           py::arg("temperature") = 0.6f, py::arg("top_p") = 0.95f, py::arg("top_k") = 0, py::arg("seed") = 0,
           py::arg("stream") = py::none(), py::arg("skip_special_tokens") = true,
           "(completions, stats) for n samples of a prompt (text, BOS added; or token ids). "
           "stream(sample_index, text) is called as text is produced; returning False cancels.");
}
