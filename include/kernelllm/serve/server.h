// `kernelllm serve`: an OpenAI-compatible HTTP server over our engine (cpp-httplib), plus
// POST /v1/kernelllm/optimize, which verifies, times and ranks k candidates for a PyTorch
// module. Concurrent requests share one batched Scheduler on the engine thread (engine_loop.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>

#include "kernelllm/base/status.h"
#include "kernelllm/harness/verify.h"
#include "kernelllm/pipeline/optimize.h"

namespace kernelllm::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;               // 0: any free port (reported through on_listening)
  std::string api_key;           // empty: no authentication
  std::string model_name;        // the id /v1/models lists and requests must name
  std::filesystem::path model_dir;  // its tokenizer_config.json gives the chat template
  int max_n = 16;                // most choices per request
  int max_tokens = 4096;         // most tokens per choice
  int64_t max_sequences = 64;    // Scheduler: live sequences over all requests
  int64_t max_kv_tokens = 0;     // Scheduler: reserved KV positions; 0 unlimited
  int http_threads = 64;         // handler threads (a streaming request holds one)
  size_t max_body_bytes = 8u << 20;
  // The optimize endpoint.
  std::string prompt_template;            // template text (load_prompt_template)
  std::filesystem::path work_root;        // one directory per optimize request under it
  harness::VerifyOptions verify;          // devices, sandbox, profile, cache
  int max_k = 16;
};

// How another thread (a signal watcher) stops a running server: request_stop() is safe to call
// at any time, before, during or after run_server.
class ServerControl {
 public:
  void request_stop();

 private:
  friend Status run_server(const ServeOptions&, OpenedEngine&, const std::function<void(int)>&, ServerControl*);
  std::mutex mu_;
  bool stop_requested_ = false;
  std::function<void()> stop_;  // set while the server listens
};

// Serves until `control` asks it to stop or the listening socket fails. `on_listening` gets the
// bound port once requests are accepted. Errors: bad limits, the address cannot be bound.
Status run_server(const ServeOptions& options, OpenedEngine& engine, const std::function<void(int port)>& on_listening,
                  ServerControl* control);

}  // namespace kernelllm::serve
