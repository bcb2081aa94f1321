// What the server's route files share: the server state, SSE and error helpers, and the
// optimize route's registration (optimize_route.cpp). Internal to src/serve.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include <httplib.h>

#include "kernelllm/serve/engine_loop.h"
#include "kernelllm/serve/server.h"
#include "serve/openai_api.h"

namespace kernelllm::serve {

struct ServerState {
  const ServeOptions& options;
  OpenedEngine& engine;
  EngineLoop& loop;
  ApiContext api;
  int64_t started_s = 0;
  std::atomic<int64_t> next_id{0};
  std::mutex optimize_mu;  // optimize requests verify one at a time (they share devices and timing)
};

void send_error(httplib::Response& res, const ApiError& e);
// An engine or pipeline Status as an API error: bad input → 400, else 500.
ApiError status_error(const Status& s, std::string param = "");
// One SSE event: "data: <json>\n\n". False when the client is gone.
bool send_event(httplib::DataSink& sink, const std::string& data);
std::string new_id(ServerState& state, const char* prefix);
int64_t unix_seconds();

void add_optimize_route(httplib::Server& http, ServerState& state);

}  // namespace kernelllm::serve
