// Worker replies are type-checked once per frame: a candidate can write frames of its own to the
// reply pipe, and a member of the wrong type must become a protocol error, never an exception.
#include <string>

#include <gtest/gtest.h>

#include "harness/workers.h"

namespace kernelllm::harness {
namespace {

Json parse(const std::string& text) { return parse_json(text, "test reply").value(); }

TEST(ReplyShape, WellFormedRepliesPass) {
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"op":"hello","pid":42,"python":"3.12"})")), "");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"op":"run","run_ms":0.5,"triton_launches":3,
                                        "new_threads":[],"anything_else":{"x":[1,"y"]}})")),
            "");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"op":"time","times_ms":[0.1,2,3e-3],
                                        "event_total_ms":1.2,"wall_total_ms":2})")),
            "");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"op":"compare","match":false,"verdict_hint":"cheat",
                                        "rule":null,"message":"m","stats":[1,2]})")),
            "");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":false,"error":{"kind":"cheat","message":"m","traceback":"",
                                        "rule":"side_stream","evidence":{"a":1}}})")),
            "");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"n_trials":3,"trial_distributions":["normal","uniform"]})")), "");
}

TEST(ReplyShape, WrongTypesAreNamed) {
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":"yes"})")), "member 'ok': expected a boolean, found string");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"run_ms":"fast"})")),
            "member 'run_ms': expected a number, found string");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"triton_launches":1.5})")),
            "member 'triton_launches': expected an integer or null, found number");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"times_ms":[0.1,"0.2"]})")),
            "member 'times_ms'[1]: expected a number, found string");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"trial_distributions":["normal",7]})")),
            "member 'trial_distributions'[1]: expected a string, found integer");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":false,"error":{"kind":"cheat","traceback":5}})")),
            "error member 'traceback': expected a string, found integer");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":false,"error":"boom"})")),
            "member 'error': expected an object, found string");
}

TEST(ReplyShape, MissingOkOrErrorIsMalformed) {
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"run_ms":1})")), "member 'ok' is missing");
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":false})")), "a failed reply without member 'error'");
  EXPECT_EQ(reply_shape_error(parse("[1,2]")), "expected a JSON object, found array");
}

}  // namespace
}  // namespace kernelllm::harness
