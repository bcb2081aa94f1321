// EndpointSource: CompletionSource over an OpenAI-compatible HTTP endpoint with cpp-httplib. k
// samples become chunks of at most max_n per request (max_n lowered for good when a 400 names n),
// run `parallel` at a time; each request is retried with backoff on 408/409/429/5xx and transport
// errors. Text is not streamed: on_text gets each sample's whole text when its request returns
// (one call at a time, from whichever thread ran that request).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "kernelllm/pipeline/endpoint.h"

namespace kernelllm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// After a 401/403: where the key came from, never the key.
std::string key_note(const EndpointOptions& o) {
  return o.api_key.empty() ? fmt::format(" (no API key was sent: ${} is not set)", o.api_key_env)
                           : fmt::format(" (the API key from ${} was refused)", o.api_key_env);
}

std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect (refused or unreachable: is the server running and listening there?)";
    case httplib::Error::ConnectionTimeout:
      return "cannot connect (no answer to the connection attempt)";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed (does the server speak https there?)";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate did not verify against the system's CA certificates";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the system's CA certificates (install ca-certificates)";
    default:
      return "transport error: " + httplib::to_string(e);
  }
}

// One request's outcome: choices, or a refusal of its n naming the n to try next.
struct Answer {
  std::optional<EndpointChoices> choices;
  std::optional<int> smaller_n;
};

class EndpointSource final : public CompletionSource {
 public:
  EndpointSource(EndpointOptions options, EndpointUrl url)
      : o_(std::move(options)), url_(std::move(url)), max_n_(o_.max_n) {}

  Result<std::vector<std::string>> complete(const std::string& prompt, int n, int max_new_tokens,
                                            const SamplingParams& sampling, const StreamCallback& on_text,
                                            GenerateStats* stats) override {
    if (n < 1) return error(ErrorCode::invalid_argument, "expected at least 1 sample, found " + std::to_string(n));
    const auto start = Clock::now();
    struct Chunk {
      int offset;
      int n;
    };
    std::vector<Chunk> chunks;
    int offset = 0;
    for (int size : split_n(n, max_n_.load())) {
      chunks.push_back({offset, size});
      offset += size;
    }
    std::vector<std::string> texts(static_cast<size_t>(n));
    std::mutex mu;  // guards everything below and on_text
    size_t next_chunk = 0;
    Status first_error;
    bool cancelled = false;
    GenerateStats local;
    std::atomic<bool> stop{false};

    // Fills one chunk, asking again for what a response left out or a lowered max_n split off.
    auto fill = [&](const Chunk& chunk) -> Status {
      int filled = 0;
      while (filled < chunk.n && !stop.load()) {
        const int ask = std::min(chunk.n - filled, max_n_.load());
        KLLM_ASSIGN_OR_RETURN(Answer a, request(prompt, ask, max_new_tokens, sampling, chunk.offset + filled, stop));
        if (a.smaller_n) {
          int current = max_n_.load();
          while (*a.smaller_n < current && !max_n_.compare_exchange_weak(current, *a.smaller_n)) {
          }
          continue;
        }
        if (!a.choices) return {};  // stopped while waiting to retry
        std::lock_guard<std::mutex> lock(mu);
        if (local.prompt_tokens == 0) local.prompt_tokens = a.choices->prompt_tokens;
        local.generated_tokens += a.choices->completion_tokens;
        const int got = std::min(ask, static_cast<int>(a.choices->texts.size()));
        for (int i = 0; i < got; ++i) {
          const int sample = chunk.offset + filled + i;
          texts[static_cast<size_t>(sample)] = std::move(a.choices->texts[static_cast<size_t>(i)]);
          if (on_text && !cancelled && !on_text(sample, texts[static_cast<size_t>(sample)])) {
            cancelled = true;
            stop = true;
          }
        }
        filled += got;
      }
      return {};
    };
    auto worker = [&] {
      while (!stop.load()) {
        Chunk chunk{0, 0};
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next_chunk == chunks.size()) return;
          chunk = chunks[next_chunk++];
        }
        Status s = fill(chunk);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = s;
          stop = true;
        }
      }
    };
    const size_t threads = std::min(chunks.size(), static_cast<size_t>(o_.parallel));
    std::vector<std::thread> pool;
    for (size_t i = 1; i < threads; ++i) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();

    local.decode_ms = seconds_since(start) * 1e3;
    if (stats != nullptr) *stats = local;
    if (!first_error.ok()) return first_error;
    if (cancelled) return error(ErrorCode::io_error, "generation cancelled");
    return texts;
  }

  std::string describe() const override {
    return fmt::format("endpoint {} model {} ({} prompt)", o_.base_url, o_.model, endpoint_prompt_name(o_.prompt));
  }

 private:
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>(url_.scheme_host_port);
    const auto timeout = std::chrono::duration<double>(o_.timeout_s);
    c->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(
        std::min(timeout, std::chrono::duration<double>(30.0))));
    c->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    c->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    if (!o_.api_key.empty()) c->set_bearer_token_auth(o_.api_key);
    return c;
  }

  std::string url_of(const std::string& path) const { return url_.scheme_host_port + path; }

  // One request with retries. Waits between attempts in short slices so that `stop` (another
  // request failed, or the caller cancelled) ends it early; then it answers without choices.
  Result<Answer> request(const std::string& prompt, int n, int max_new_tokens, const SamplingParams& sampling,
                         int sample_offset, const std::atomic<bool>& stop) {
    const std::string path = url_.path + (o_.prompt == EndpointPrompt::chat ? "/chat/completions" : "/completions");
    const std::string body = endpoint_request_body(o_, prompt, n, max_new_tokens, sampling, sample_offset).dump();
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::string last;
    for (int attempt = 0;; ++attempt) {
      std::optional<double> retry_after;
      const auto sent = Clock::now();
      httplib::Result res = client()->Post(path, body, "application/json");
      if (!res) {
        const httplib::Error e = res.error();
        const double waited = seconds_since(sent);
        last = e == httplib::Error::Read && waited >= 0.9 * o_.timeout_s
                   ? fmt::format("no answer within {:g} s (--endpoint-timeout)", o_.timeout_s)
                   : transport_error(e);
        // TLS failures do not go away on their own: no retries.
        if (e == httplib::Error::SSLConnection || e == httplib::Error::SSLServerVerification ||
            e == httplib::Error::SSLLoadingCerts) {
          return error(ErrorCode::io_error, fmt::format("endpoint {}: {}", url_of(path), last));
        }
      } else if (res->status == 200) {
        auto parsed = parse_endpoint_response(res->body, o_.prompt);
        if (!parsed.ok()) return parsed.status().with_context("endpoint " + url_of(path));
        return Answer{std::move(*parsed), std::nullopt};
      } else {
        const std::string message = endpoint_error_message(res->body);
        if (res->status == 400) {
          if (auto smaller = endpoint_smaller_n(message, n)) return Answer{std::nullopt, *smaller};
        }
        last = fmt::format("HTTP {}: {}", res->status, message);
        if (res->status == 401 || res->status == 403) last += key_note(o_);
        if (!endpoint_status_retryable(res->status)) {
          return error(ErrorCode::io_error, fmt::format("endpoint {} (model {}): {}", url_of(path), o_.model, last));
        }
        retry_after = endpoint_retry_after(res->get_header_value("Retry-After"), res->get_header_value("retry-after-ms"));
      }
      if (attempt >= o_.retries) {
        return error(ErrorCode::io_error, fmt::format("endpoint {} (model {}): {}; gave up after {} attempt(s)", url_of(path),
                                                      o_.model, last, attempt + 1));
      }
      const double delay = endpoint_retry_delay_s(o_, attempt, retry_after, unit(rng));
      const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
      while (Clock::now() < until) {
        if (stop.load()) return Answer{};
        std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(50)));
      }
    }
  }

  EndpointOptions o_;
  EndpointUrl url_;
  std::atomic<int> max_n_;
};

}  // namespace

Result<std::string> endpoint_only_model(const EndpointOptions& o) {
  KLLM_ASSIGN_OR_RETURN(EndpointUrl url, parse_endpoint_url(o.base_url));
  httplib::Client c(url.scheme_host_port);
  c.set_connection_timeout(std::chrono::seconds(10));
  c.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(o.timeout_s)));
  if (!o.api_key.empty()) c.set_bearer_token_auth(o.api_key);
  const std::string where = url.scheme_host_port + url.path + "/models";
  httplib::Result res = c.Get(url.path + "/models");
  if (!res) {
    return error(ErrorCode::io_error, fmt::format("endpoint {}: cannot list models: {}", where, transport_error(res.error())));
  }
  if (res->status != 200) {
    const std::string note = res->status == 401 || res->status == 403 ? key_note(o)
                             : res->status == 404                     ? " (give --endpoint-model NAME)"
                                                                      : "";
    return error(ErrorCode::io_error,
                 fmt::format("endpoint {}: HTTP {}: {}{}", where, res->status, endpoint_error_message(res->body), note));
  }
  KLLM_ASSIGN_OR_RETURN(Json j, parse_json(res->body, "model list from " + where));
  std::vector<std::string> ids;
  if (j.is_object() && j.contains("data") && j["data"].is_array()) {
    for (const Json& m : j["data"]) {
      if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
    }
  }
  if (ids.size() != 1) {
    std::string listed;
    for (const std::string& id : ids) listed += (listed.empty() ? " (" : ", ") + id;
    if (!listed.empty()) listed += ")";
    return error(ErrorCode::invalid_argument,
                 fmt::format("endpoint {}: expected exactly one model when --endpoint-model is not given, found {}{}", where,
                             ids.size(), listed));
  }
  return ids[0];
}

Result<std::unique_ptr<CompletionSource>> open_endpoint(EndpointOptions options) {
  KLLM_RETURN_IF_ERROR(validate(options));
  KLLM_ASSIGN_OR_RETURN(EndpointUrl url, parse_endpoint_url(options.base_url));
  if (options.model.empty()) {
    KLLM_ASSIGN_OR_RETURN(options.model, endpoint_only_model(options));
  }
  return std::unique_ptr<CompletionSource>(std::make_unique<EndpointSource>(std::move(options), std::move(url)));
}

}  // namespace kernelllm
