// The HTTP side of `kernelllm serve` (cpp-httplib): authentication, /v1/models,
// /v1/completions and /v1/chat/completions (whole or as server-sent events), /health, and
// OpenAI-style error bodies for every 4xx/5xx. Handlers parse and tokenize on their own thread;
// generation happens on the engine thread (engine_loop.h).
#include "kernelllm/serve/server.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "serve/routes.h"

namespace kernelllm::serve {
namespace {

using namespace std::chrono_literals;

// Idle streams send an SSE comment this often, so that a client that went away is noticed
// (the write fails) and its request cancelled.
constexpr auto kHeartbeat = 1000ms;

bool authorized(const ServeOptions& o, const httplib::Request& req) {
  if (o.api_key.empty()) return true;
  return req.get_header_value("Authorization") == "Bearer " + o.api_key;
}

std::string finish_name(const RequestChannel& ch, int32_t i, const Completion& c) {
  if (ch.stopped_by_string(i)) return "stop";
  return c.finish == FinishReason::stop ? "stop" : "length";
}

// Streams one request's chunks until it ends or the client goes away (then it is cancelled).
bool stream_request(ServerState& s, const EngineRequest& r, const std::shared_ptr<RequestChannel>& ch,
                    const std::string& id, int64_t created, httplib::DataSink& sink) {
  const std::string& model = s.api.model_name;
  const auto send = [&](const Json& j) { return send_event(sink, j.dump(-1, ' ', false, Json::error_handler_t::replace)); };
  const auto gone = [&] {  // the client went away: its request ends at the engine's next step
    ch->cancel();
    return false;
  };
  if (r.chat) {
    for (int i = 0; i < r.n; ++i) {
      if (!send(chunk_body(true, id, created, model, i, "", nullptr, true))) return gone();
    }
  }
  std::vector<StreamPiece> pieces;
  for (;;) {
    pieces.clear();
    auto result = ch->wait(kHeartbeat, pieces);
    for (const StreamPiece& p : pieces) {
      if (!send(chunk_body(r.chat, id, created, model, p.sample, p.text, nullptr, false))) return gone();
    }
    if (pieces.empty() && !result && !sink.write(": keep-alive\n\n", 14)) return gone();
    if (!result) continue;
    if (!result->ok()) {
      send(status_error(result->status()).to_json());
    } else {
      Usage usage{static_cast<int64_t>(r.prompt_ids.size()), (*result)->stats.generated_tokens};
      for (size_t i = 0; i < (*result)->completions.size(); ++i) {
        const std::string reason = finish_name(*ch, static_cast<int32_t>(i), (*result)->completions[i]);
        if (!send(chunk_body(r.chat, id, created, model, static_cast<int>(i), "", &reason, false))) return false;
      }
      if (r.include_usage && !send(usage_chunk(r.chat, id, created, model, usage))) return false;
    }
    if (!send_event(sink, "[DONE]")) return false;
    sink.done();
    return true;
  }
}

void handle_generate(ServerState& s, bool chat, const httplib::Request& req, httplib::Response& res) {
  EngineRequest r;
  if (auto e = parse_request(req.body, chat, s.api, r)) return send_error(res, *e);
  GenerateOptions g;
  g.num_samples = r.n;
  g.max_new_tokens = r.max_tokens;
  g.sampling = r.sampling;
  g.stop_ids = s.engine.stop_ids;
  if (chat) {
    // The chat format ends a turn with <|eot_id|>, whatever generation_config.json lists.
    if (auto eot = s.engine.tokenizer->token_to_id("<|eot_id|>")) g.stop_ids.push_back(*eot);
  }
  const std::string id = new_id(s, chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = unix_seconds();
  auto ch = s.loop.submit(r.prompt_ids, g, r.stop);

  if (r.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&s, r, ch, id, created](size_t, httplib::DataSink& sink) { return stream_request(s, r, ch, id, created, sink); },
        [ch](bool) { ch->cancel(); });  // a no-op when the request has ended
    return;
  }
  std::vector<StreamPiece> pieces;
  std::optional<Result<RequestResult>> result;
  while (!(result = ch->wait(kHeartbeat, pieces))) {
  }
  if (!result->ok()) return send_error(res, status_error(result->status(), chat ? "messages" : "prompt"));
  std::vector<Choice> choices((*result)->completions.size());
  for (const StreamPiece& p : pieces) choices[static_cast<size_t>(p.sample)].text += p.text;
  for (size_t i = 0; i < choices.size(); ++i) {
    choices[i].finish_reason = finish_name(*ch, static_cast<int32_t>(i), (*result)->completions[i]);
  }
  const Usage usage{static_cast<int64_t>(r.prompt_ids.size()), (*result)->stats.generated_tokens};
  res.set_content(response_body(chat, id, created, s.api.model_name, choices, usage).dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

Json model_body(const ServerState& s) {
  return Json{{"id", s.api.model_name},
              {"object", "model"},
              {"created", s.started_s},
              {"owned_by", "kernelllm"},
              {"max_model_len", s.api.limits.context}};
}

}  // namespace

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.to_json().dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

ApiError status_error(const Status& s, std::string param) {
  switch (s.code()) {
    case ErrorCode::invalid_argument:
    case ErrorCode::out_of_range:
    case ErrorCode::resource_exhausted:
    case ErrorCode::unsupported:
    case ErrorCode::parse_error:
      return ApiError{400, s.message(), "invalid_request_error", std::move(param), std::string(error_code_name(s.code()))};
    default:
      return ApiError{500, s.message(), "server_error", "", std::string(error_code_name(s.code()))};
  }
}

bool send_event(httplib::DataSink& sink, const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  return sink.write(event.data(), event.size());
}

std::string new_id(ServerState& state, const char* prefix) {
  static const uint64_t salt = std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%08llx%06llx", prefix, static_cast<unsigned long long>(salt & 0xffffffffu),
                static_cast<unsigned long long>(state.next_id++));
  return buf;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void ServerControl::request_stop() {
  std::lock_guard lock(mu_);
  stop_requested_ = true;
  if (stop_) stop_();
}

Status run_server(const ServeOptions& o, OpenedEngine& engine, const std::function<void(int port)>& on_listening,
                  ServerControl* control) {
  SchedulerOptions so;
  so.max_sequences = o.max_sequences;
  so.max_kv_tokens = o.max_kv_tokens;
  if (o.max_n + 1 > o.max_sequences) {
    return error(ErrorCode::invalid_argument, "expected max n + 1 <= max sequences (a request holds n samples and its "
                                              "prompt), found max n " + std::to_string(o.max_n) + " and max sequences " +
                                              std::to_string(o.max_sequences));
  }
  const Result<ChatTemplate> chat = load_chat_template(o.model_dir);
  EngineLoop loop(*engine.backend, *engine.tokenizer, so);
  ServerState s{o, engine, loop, {}, unix_seconds(), {}, {}};
  s.api.tokenizer = engine.tokenizer.get();
  s.api.chat = &chat;
  s.api.model_name = o.model_name;
  s.api.limits = ApiLimits{o.max_n, o.max_tokens, engine.backend->config().max_position_embeddings};

  httplib::Server http;
  const int threads = o.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(o.max_body_bytes);
  // Short: an idle keep-alive connection holds a worker, and stopping waits for it.
  http.set_keep_alive_timeout(2);
  http.set_read_timeout(60);
  http.set_pre_routing_handler([&o](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 || authorized(o, req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{401, "Incorrect API key provided (expected 'Authorization: Bearer <key>')",
                             "invalid_request_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Everything >= 400 without a body of ours (unknown routes, 413 too large, bad HTTP) gets one.
  http.set_error_handler(httplib::Server::HandlerWithResponse([&o](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e{res.status, "", res.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
    if (res.status == 404) {
      e.message = "Unknown request URL: " + req.method + " " + req.path;
      e.code = "unknown_url";
    } else if (res.status == 413) {
      e.message = "request body too large (the limit is " + std::to_string(o.max_body_bytes) + " bytes)";
      e.code = "request_too_large";
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, "internal error: " + what, "server_error", "", ""});
  });

  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    const EngineLoopStats st = s.loop.stats();
    res.set_content(Json{{"status", "ok"},
                         {"requests_finished", st.requests_finished},
                         {"generated_tokens", st.generated_tokens},
                         {"running", st.running},
                         {"queued", st.queued}}
                        .dump(),
                    "application/json");
  });
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(Json{{"object", "list"}, {"data", Json::array({model_body(s)})}}.dump(), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != s.api.model_name) {
      return send_error(res, ApiError{404, "The model '" + std::string(req.matches[1]) + "' does not exist",
                                      "invalid_request_error", "model", "model_not_found"});
    }
    res.set_content(model_body(s).dump(), "application/json");
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) { handle_generate(s, false, req, res); });
  http.Post("/v1/chat/completions",
            [&s](const httplib::Request& req, httplib::Response& res) { handle_generate(s, true, req, res); });
  add_optimize_route(http, s);

  const int port = o.port == 0 ? http.bind_to_any_port(o.host) : (http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) {
    return error(ErrorCode::io_error, "cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                          " (address in use, or not an address of this machine)");
  }
  if (control) {
    std::lock_guard lock(control->mu_);
    if (control->stop_requested_) return {};
    control->stop_ = [&http] { http.stop(); };
  }
  if (on_listening) on_listening(port);
  const bool clean = http.listen_after_bind();
  if (control) {
    std::lock_guard lock(control->mu_);
    control->stop_ = nullptr;
  }
  loop.stop();
  if (!clean) return error(ErrorCode::io_error, "the server's listening socket failed");
  return {};
}

}  // namespace kernelllm::serve
