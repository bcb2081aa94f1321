// POST /v1/kernelllm/optimize: {"module": "<PyTorch source>", "k": 4, ...} → the optimize report
// (candidates verified, timed and ranked), whole or as server-sent events: one "verdict" event
// per candidate as the verifier decides it, then one "result" event with the report. The
// samples come from the shared engine thread, batched with everything else being served.
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "serve/routes.h"

#include "kernelllm/engine/sampler.h"

namespace kernelllm::serve {
namespace {

using namespace std::chrono_literals;

// A CompletionSource over the engine thread; `abandoned` (the client went away) cancels it.
class LoopSource final : public CompletionSource {
 public:
  LoopSource(ServerState& s, const std::atomic<bool>& abandoned) : s_(s), abandoned_(abandoned) {}

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                            const SamplingParams& sampling, const StreamCallback& on_text,
                                            GenerateStats* stats) override {
    KLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, s_.engine.tokenizer->encode(prompt, /*add_special_tokens=*/true));
    const int64_t context = s_.api.limits.context;
    if (static_cast<int64_t>(ids.size()) + max_new_tokens > context) {
      return error(ErrorCode::out_of_range, "the prompt (" + std::to_string(ids.size()) + " tokens) + max_tokens (" +
                                                std::to_string(max_new_tokens) + ") exceeds the model's context of " +
                                                std::to_string(context) + " tokens");
    }
    GenerateOptions g;
    g.num_samples = n;
    g.max_new_tokens = max_new_tokens;
    g.sampling = sampling;
    g.stop_ids = s_.engine.stop_ids;
    const int64_t prompt_tokens = static_cast<int64_t>(ids.size());
    auto ch = s_.loop.submit(std::move(ids), g);
    std::vector<std::string> texts(static_cast<size_t>(n));
    std::vector<StreamPiece> pieces;
    for (;;) {
      pieces.clear();
      auto result = ch->wait(200ms, pieces);
      for (const StreamPiece& p : pieces) {
        texts[static_cast<size_t>(p.sample)] += p.text;
        if (on_text && !on_text(p.sample, p.text)) ch->cancel();
      }
      if (abandoned_) ch->cancel();
      if (!result) continue;
      if (!result->ok()) return result->status();
      if (stats) {
        *stats = (*result)->stats;
        stats->prompt_tokens = prompt_tokens;
      }
      return texts;
    }
  }
  std::string describe() const override { return "serve:" + s_.engine.description; }

 private:
  ServerState& s_;
  const std::atomic<bool>& abandoned_;
};

struct OptimizeRequest {
  std::string module;
  OptimizeOptions options;
  bool stream = false;
};

std::optional<ApiError> parse_optimize(ServerState& s, const std::string& body_text, OptimizeRequest& out) {
  const Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return ApiError{400, "could not parse the JSON body of the request (expected a JSON object)", "invalid_request_error",
                    "", "invalid_json"};
  }
  if (body.contains("model") && body["model"] != s.api.model_name) {
    return ApiError{404, "The model " + body["model"].dump() + " does not exist; this server serves '" + s.api.model_name + "'",
                    "invalid_request_error", "model", "model_not_found"};
  }
  const auto bad = [](const char* param, std::string message) {
    return ApiError{400, std::move(message), "invalid_request_error", param, "invalid_value"};
  };
  if (!body.contains("module") || !body["module"].is_string()) {
    return bad("module", "'module': expected the PyTorch module's source as a string");
  }
  out.module = body["module"].get<std::string>();
  OptimizeOptions& o = out.options;
  const auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t fallback, int64_t& v) -> std::optional<ApiError> {
    v = fallback;
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_number_integer() || body[key].get<int64_t>() < lo || body[key].get<int64_t>() > hi) {
      return bad(key, std::string("'") + key + "': expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], found " + body[key].dump());
    }
    v = body[key].get<int64_t>();
    return std::nullopt;
  };
  int64_t v = 0;
  if (auto e = integer("k", 1, s.options.max_k, 4, v)) return e;
  o.k = static_cast<int>(v);
  if (auto e = integer("max_tokens", 1, s.options.max_tokens, std::min(2048, s.options.max_tokens), v)) return e;
  o.max_new_tokens = static_cast<int>(v);
  if (auto e = integer("rounds", 1, 4, 1, v)) return e;
  o.rounds = static_cast<int>(v);
  if (auto e = integer("seed", 0, std::numeric_limits<int64_t>::max(), static_cast<int64_t>(std::random_device{}() >> 1), v)) return e;
  o.sampling.seed = static_cast<uint64_t>(v);
  o.sampling.temperature = kKernelLLMTemperature;
  o.sampling.top_p = kKernelLLMTopP;
  for (const char* key : {"temperature", "top_p"}) {
    if (!body.contains(key) || body[key].is_null()) continue;
    if (!body[key].is_number()) return bad(key, std::string("'") + key + "': expected a number, found " + body[key].dump());
    (std::string(key) == "temperature" ? o.sampling.temperature : o.sampling.top_p) = body[key].get<float>();
  }
  if (Status st = validate(o.sampling); !st.ok()) return bad("temperature", st.message());
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return bad("stream", "'stream': expected true or false, found " + body["stream"].dump());
    out.stream = body["stream"].get<bool>();
  }
  o.prompt_template = s.options.prompt_template;
  o.verify = s.options.verify;
  o.work_dir = s.options.work_root / new_id(s, "optimize-");
  if (Status st = validate_optimize_input(out.module, o); !st.ok()) return bad("module", st.message());
  return std::nullopt;
}

// Runs one optimize request; `on_event` gets each verdict (from a verifier thread, serialized).
Result<Json> run_optimize(ServerState& s, OptimizeRequest& r, const std::atomic<bool>& abandoned,
                          const std::function<void(const Json&)>& on_event) {
  std::lock_guard lock(s.optimize_mu);
  LoopSource source(s, abandoned);
  int round = 1;
  if (on_event) {
    r.options.verify.on_result = [&](size_t index, const harness::CandidateResult& c) {
      on_event(Json{{"type", "verdict"}, {"round", round}, {"index", index}, {"result", c.to_json()}});
    };
  }
  auto result = optimize(r.module, source, r.options, [&](const OptimizeEvent& e) {
    if (e.kind == OptimizeEventKind::generated && on_event) {
      round = e.round;
      on_event(Json{{"type", "generated"}, {"round", e.round}, {"tokens", e.tokens}, {"tokens_per_s", e.tokens_per_s}});
    }
  });
  if (!result.ok()) return result.status();
  Json report = result->to_json();
  report["options"] = Json{{"k", r.options.k},           {"rounds", r.options.rounds},
                           {"max_tokens", r.options.max_new_tokens}, {"temperature", r.options.sampling.temperature},
                           {"top_p", r.options.sampling.top_p},      {"seed", r.options.sampling.seed},
                           {"verify_devices", r.options.verify.devices}, {"work_dir", r.options.work_dir.string()}};
  return report;
}

}  // namespace

void add_optimize_route(httplib::Server& http, ServerState& s) {
  http.Post("/v1/kernelllm/optimize", [&s](const httplib::Request& req, httplib::Response& res) {
    auto r = std::make_shared<OptimizeRequest>();
    if (auto e = parse_optimize(s, req.body, *r)) return send_error(res, *e);
    if (!r->stream) {
      const std::atomic<bool> never{false};
      auto report = run_optimize(s, *r, never, {});
      if (!report.ok()) return send_error(res, status_error(report.status(), "module"));
      res.set_content(report->dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [&s, r](size_t, httplib::DataSink& sink) {
      std::mutex mu;  // events come from this thread and from verifier threads
      std::atomic<bool> gone{false};
      const auto send = [&](const Json& j) {
        std::lock_guard lock(mu);
        if (!gone && !send_event(sink, j.dump(-1, ' ', false, Json::error_handler_t::replace))) gone = true;
      };
      auto report = run_optimize(s, *r, gone, send);
      if (report.ok()) {
        send(Json{{"type", "result"}, {"report", *report}});
      } else {
        send(Json{{"type", "error"}, {"error", status_error(report.status(), "module").to_json()["error"]}});
      }
      std::lock_guard lock(mu);
      if (gone || !send_event(sink, "[DONE]")) return false;
      sink.done();
      return true;
    });
  });
}

}  // namespace kernelllm::serve
