// The OpenAI-compatible wire helpers (pipeline/endpoint.h): URLs, request bodies, responses of both
// forms, error bodies of several servers, when to retry and how long to wait, n splitting.
#include <gtest/gtest.h>

#include "kernelllm/pipeline/endpoint.h"

namespace kernelllm {
namespace {

TEST(EndpointUrl, SplitsSchemeHostPortFromThePathWithoutTrailingSlash) {
  auto u = parse_endpoint_url("http://127.0.0.1:8000/v1/");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->scheme_host_port, "http://127.0.0.1:8000");
  EXPECT_EQ(u->path, "/v1");
  auto bare = parse_endpoint_url("https://api.example.com");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->path, "");
}

TEST(EndpointUrl, RejectsOtherSchemesMissingHostsAndEndpointPaths) {
  for (const char* bad : {"127.0.0.1:8000/v1", "ftp://host/v1", "http:///v1", "http://h/v1/completions",
                          "http://h/v1/chat/completions", "http://h/v1/models", "http://h/v1?x=1"}) {
    auto u = parse_endpoint_url(bad);
    ASSERT_FALSE(u.ok()) << bad;
    EXPECT_NE(u.status().message().find(bad), std::string::npos) << u.status().message();
  }
}

TEST(EndpointOptions, ValidateNamesTheOptionAndTheValue) {
  EndpointOptions o;
  o.base_url = "http://h/v1";
  EXPECT_TRUE(validate(o).ok());
  o.max_n = 0;
  EXPECT_NE(validate(o).message().find("--endpoint-max-n: expected at least 1, found 0"), std::string::npos);
  o.max_n = 1;
  o.timeout_s = 0;
  EXPECT_NE(validate(o).message().find("--endpoint-timeout"), std::string::npos);
}

TEST(EndpointRequest, CompletionBodyCarriesPromptSamplingAndAnOffsetSeed) {
  EndpointOptions o;
  o.model = "m";
  SamplingParams s{0.6f, 0.95f, 0, 7};
  Json b = endpoint_request_body(o, "PROMPT", 3, 100, s, 4);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], "PROMPT");
  EXPECT_EQ(b["n"], 3);
  EXPECT_EQ(b["max_tokens"], 100);
  EXPECT_EQ(b["seed"], 11);
  EXPECT_EQ(b["stream"], false);
  EXPECT_FALSE(b.contains("top_k"));  // OpenAI refuses it; sent only when set
  EXPECT_FALSE(b.contains("messages"));
}

TEST(EndpointRequest, ChatBodyPutsThePromptInOneUserMessage) {
  EndpointOptions o;
  o.prompt = EndpointPrompt::chat;
  SamplingParams s{0.0f, 1.0f, 5, 0};
  Json b = endpoint_request_body(o, "PROMPT", 1, 10, s, 0);
  ASSERT_TRUE(b.contains("messages"));
  EXPECT_EQ(b["messages"], Json::parse(R"([{"role": "user", "content": "PROMPT"}])"));
  EXPECT_FALSE(b.contains("prompt"));
  EXPECT_EQ(b["top_k"], 5);
}

TEST(EndpointResponse, CompletionChoicesAreOrderedByIndexWithUsage) {
  auto r = parse_endpoint_response(
      R"({"choices": [{"index": 1, "text": "b", "finish_reason": "length"}, {"index": 0, "text": "a", "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}})",
      EndpointPrompt::kernelllm);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->finish_reasons, (std::vector<std::string>{"stop", "length"}));
  EXPECT_EQ(r->prompt_tokens, 12);
  EXPECT_EQ(r->completion_tokens, 30);
}

TEST(EndpointResponse, ChatContentIsReadAndNullContentIsEmpty) {
  auto r = parse_endpoint_response(
      R"({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}, {"index": 1, "message": {"role": "assistant", "content": null}}]})",
      EndpointPrompt::chat);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->texts, (std::vector<std::string>{"x", ""}));
  EXPECT_EQ(r->completion_tokens, 0);  // no usage sent
}

TEST(EndpointResponse, MalformedAnswersAreParseErrorsNamingWhatIsMissing) {
  struct Case {
    const char* body;
    EndpointPrompt form;
    const char* says;
  };
  for (const Case& c : {Case{"not json", EndpointPrompt::kernelllm, "completion response"},
                        Case{R"({"choices": []})", EndpointPrompt::kernelllm, "non-empty \"choices\""},
                        Case{R"({"choices": [{"index": 0}]})", EndpointPrompt::kernelllm, "text"},
                        Case{R"({"choices": [{"index": 0, "text": "a"}]})", EndpointPrompt::chat, "\"message\" object"},
                        Case{R"({"choices": [{"index": 0, "text": "a"}, {"index": 0, "text": "b"}]})",
                             EndpointPrompt::kernelllm, "index 0 appears twice"}}) {
    auto r = parse_endpoint_response(c.body, c.form);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

TEST(EndpointError, MessageIsTakenFromEachServersShape) {
  EXPECT_EQ(endpoint_error_message(R"({"error": {"message": "Rate limit", "type": "x"}})"), "Rate limit");
  EXPECT_EQ(endpoint_error_message(R"({"object": "error", "message": "n too big", "code": 400})"), "n too big");
  EXPECT_EQ(endpoint_error_message(R"({"detail": "Not authenticated"})"), "Not authenticated");
  EXPECT_EQ(endpoint_error_message(R"({"error": "bad"})"), "bad");
  EXPECT_EQ(endpoint_error_message("Bad Gateway\n"), "Bad Gateway ");
  EXPECT_EQ(endpoint_error_message(""), "(empty body)");
  EXPECT_EQ(endpoint_error_message(std::string(400, 'x')).size(), 303u);
}

TEST(EndpointRetry, RetriesRateLimitsConflictsTimeoutsAndServerErrorsOnly) {
  for (int s : {408, 409, 429, 500, 502, 503, 504}) EXPECT_TRUE(endpoint_status_retryable(s)) << s;
  for (int s : {400, 401, 403, 404, 422}) EXPECT_FALSE(endpoint_status_retryable(s)) << s;
}

TEST(EndpointRetry, SmallerNComesFromTheMessageOrHalving) {
  EXPECT_EQ(endpoint_smaller_n("n must be at most 2, found 5", 5), 2);
  EXPECT_EQ(endpoint_smaller_n("'n' must be between 1 and 8", 16), 8);
  EXPECT_EQ(endpoint_smaller_n("Only one completion choice is allowed", 4), 2);
  EXPECT_EQ(endpoint_smaller_n("n > 1 is not supported", 3), 1);
  EXPECT_EQ(endpoint_smaller_n("n must be at most 2", 1), std::nullopt);  // already 1: a real error
  EXPECT_EQ(endpoint_smaller_n("max_tokens must be at most 4096", 8), std::nullopt);
  EXPECT_EQ(endpoint_smaller_n("prompt is too long (n_ctx 2048)", 8), std::nullopt);
}

TEST(EndpointRetry, RetryAfterInSecondsOrMilliseconds) {
  EXPECT_EQ(endpoint_retry_after("2", ""), 2.0);
  EXPECT_EQ(endpoint_retry_after(" 1.5 ", ""), 1.5);
  EXPECT_EQ(endpoint_retry_after("2", "250"), 0.25);  // retry-after-ms is the finer one
  EXPECT_EQ(endpoint_retry_after("", ""), std::nullopt);
  EXPECT_EQ(endpoint_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", ""), std::nullopt);
  EXPECT_EQ(endpoint_retry_after("-3", ""), std::nullopt);
}

TEST(EndpointRetry, DelayDoublesWithJitterCapsAndHonoursRetryAfter) {
  EndpointOptions o;
  o.backoff_s = 0.5;
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 0, std::nullopt, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 0, std::nullopt, 0.0), 0.25);
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 3, std::nullopt, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 20, std::nullopt, 1.0), kMaxBackoffS);
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 5, 1.0, 0.3), 1.0);
  EXPECT_DOUBLE_EQ(endpoint_retry_delay_s(o, 0, 600.0, 0.3), kMaxBackoffS);
}

TEST(EndpointSplit, ChunksOfAtMostMaxNInOrder) {
  EXPECT_EQ(split_n(5, 2), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(split_n(4, 16), (std::vector<int>{4}));
  EXPECT_EQ(split_n(3, 1), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(split_n(0, 4), (std::vector<int>{}));
}

TEST(EndpointFacts, NameUrlModelAndFormButNeverTheKey) {
  EndpointOptions o;
  o.base_url = "http://h/v1";
  o.model = "m";
  o.api_key = "secret";
  Json f = endpoint_facts(o);
  EXPECT_EQ(f, Json::parse(R"({"url": "http://h/v1", "model": "m", "prompt": "kernelllm"})"));
  EXPECT_EQ(f.dump().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace kernelllm
