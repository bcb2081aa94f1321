// JSON the harness reads but does not fully control is type-checked before use: worker replies
// once per frame (a candidate can write frames of its own to the reply pipe) and verify-cache
// entries (stale or damaged). A member of the wrong type is a named error, never an exception.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/verifier.h"
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
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"seed":1234567,"probe":true,"input_bytes":64,"output_bytes":64})")), "");
}

TEST(ReplyShape, WrongTypesAreNamed) {
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":"yes"})")), "member 'ok': expected a boolean, found string");
  // make_inputs: the trial's seed, which the candidate's process makes its inputs from.
  EXPECT_EQ(reply_shape_error(parse(R"({"v":1,"ok":true,"seed":"123","probe":false})")),
            "member 'seed': expected an integer, found string");
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

TEST(JsonMembers, NamesTheFirstMisfitAndIgnoresMissingMembers) {
  constexpr JsonMember members[] = {{"a", kJsonInteger}, {"b", kJsonNumber | kJsonNull}, {"c", kJsonArray, kJsonString}};
  EXPECT_EQ(json_members_error(parse(R"({})"), members), "");
  EXPECT_EQ(json_members_error(parse(R"({"a":1,"b":null,"c":["x"],"d":{}})"), members), "");
  EXPECT_EQ(json_members_error(parse(R"({"a":1,"b":2.5,"c":[]})"), members), "");
  EXPECT_EQ(json_members_error(parse(R"({"a":1.5})"), members, "in x: "),
            "in x: member 'a': expected an integer, found number");
  EXPECT_EQ(json_members_error(parse(R"({"b":true})"), members), "member 'b': expected a number or null, found boolean");
  EXPECT_EQ(json_members_error(parse(R"({"c":["x",{}]})"), members), "member 'c'[1]: expected a string, found object");
  EXPECT_EQ(json_members_error(parse("3"), members), "expected an object, found integer");
}

TEST(CacheEntry, WellFormedEntriesAreRead) {
  Json entry = parse(R"({"path":"c.py","verdict":"correct","rule":"","message":"5 trial(s) match","stderr_tail":"",
                         "stats":{},"evidence":{},"cached":false,"speedup":1.5,"multishape_note":"",
                         "timing":{"meaningful":true,"times_ms":[1.0,1.5],"event_total_ms":2.5,"wall_total_ms":3,
                                   "orchestrator_wall_ms":4},
                         "multishape":{"verdict":"pass","variants":[{"name":"half","verdict":"correct","message":"",
                                                                     "sizes":{"n":[8,4]}}]}})");
  ASSERT_EQ(cache_entry_error(entry), "");
  CandidateResult r;
  result_from_cache(entry, r);
  EXPECT_EQ(r.verdict, Verdict::correct);
  ASSERT_TRUE(r.timing.has_value());
  EXPECT_EQ(r.timing->times_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(r.speedup, 1.5);
  ASSERT_TRUE(r.multishape.has_value());
  EXPECT_EQ(r.multishape->variants.size(), 1u);
  // A result without timing (a failing candidate) is an entry too.
  EXPECT_EQ(cache_entry_error(parse(R"({"verdict":"wrong_output","timing":null,"multishape":null})")), "");
}

TEST(CacheEntry, DamagedEntriesAreNamedNotRead) {
  EXPECT_EQ(cache_entry_error(parse(R"({"verdict":7})")), "member 'verdict': expected a string, found integer");
  EXPECT_EQ(cache_entry_error(parse(R"({"verdict":"splendid"})")), "no known verdict");
  EXPECT_EQ(cache_entry_error(parse(R"({"verdict":"correct","timing":{"times_ms":["1"]}})")),
            "timing member 'times_ms'[0]: expected a number, found string");
  EXPECT_EQ(cache_entry_error(parse(R"({"verdict":"correct","multishape":{"verdict":"pass",
                                                  "variants":[{"name":1}]}})")),
            "multishape variant 0 member 'name': expected a string, found integer");
  EXPECT_EQ(cache_entry_error(parse(R"([])")), "expected an object, found array");
}

// Run directories of verify runs killed before their clean-up (their output files sit in RAM
// under /dev/shm) are removed by the next run: only ours, only of processes that are gone.
TEST(RunDirs, OnlyThoseOfDeadProcessesAreRemoved) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / fmt::format("kllm-rundirs-{}", ::getpid());
  fs::create_directories(base);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // now a pid of no process
  const fs::path dead = base / fmt::format("kernelllm-verify-{}-aaaaaa", child);
  const fs::path alive = base / fmt::format("kernelllm-verify-{}-bbbbbb", ::getpid());
  const fs::path unnamed = base / "kernelllm-verify-cccccc";
  const fs::path other = base / fmt::format("something-{}-dddddd", child);
  for (const fs::path& d : {dead, alive, unnamed, other}) fs::create_directories(d / "shared-0");
  std::ofstream(dead / "shared-0" / "out-0.safetensors") << "left behind";
  EXPECT_EQ(remove_stale_run_dirs(base), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive) && fs::exists(unnamed) && fs::exists(other));
  EXPECT_EQ(remove_stale_run_dirs(base), 0);
  fs::remove_all(base);
}

// After the SIGINT/SIGTERM clean-up's stop, no run directory is made any more (a verifier still
// starting on another thread would otherwise leave one behind the clean-up: seen in CI).
TEST(RunDirs, NoneIsMadeAfterTheStop) {
  namespace fs = std::filesystem;
  const std::string mine = fmt::format("{}{}-rundirs-test-", kRunDirPrefix, ::getpid());
  auto count_mine = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(run_dir_base())) n += e.path().filename().string().rfind(mine, 0) == 0;
    return n;
  };
  auto made = make_run_dir("rundirs-test-");
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_TRUE(fs::is_directory(*made));
  EXPECT_EQ(fs::path(*made).parent_path(), fs::path(run_dir_base()));
  stop_making_run_dirs();
  auto refused = make_run_dir("rundirs-test-");
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(count_mine(), 1u);  // only the one made before the stop
  fs::remove_all(*made);
}

// A candidate's source travels to the judge's audit as base64 (it may not be UTF-8).
TEST(Base64, EncodesWithPaddingAndAnyByte) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\x00\x80", 3)), "/wCA");
}

// A stand-in interpreter that counts its runs and answers as the probe script would (or fails).
std::filesystem::path counting_python(const std::filesystem::path& dir, bool ok) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path script = dir / "python";
  std::ofstream(script) << "#!/bin/sh\necho run >> " << (dir / "runs").string() << "\n"
                        << (ok ? "echo '{\"executable\": \"/opt/py/bin/python3\", \"python\": \"3.11\", \"torch\": \"2.5\", "
                                 "\"triton\": \"3.1\", \"numpy\": \"2.0\", \"cuda\": [], \"paths\": [\"/opt/py\"]}'\n"
                               : "echo 'No module named torch' >&2; exit 1\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  return script;
}

int runs(const std::filesystem::path& dir) {
  std::ifstream in(dir / "runs");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(PythonProbe, RunsOncePerInterpreterAndKeepsNoFailure) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kllm-probe-{}", ::getpid());
  const auto good = counting_python(dir / "good", true), bad = counting_python(dir / "bad", false);
  for (int k = 0; k < 3; ++k) {
    auto env = probe_python(good.string(), false);
    ASSERT_TRUE(env.ok()) << env.status().to_string();
    EXPECT_EQ(env->executable, "/opt/py/bin/python3");
    EXPECT_EQ(env->torch_version, "2.5");
  }
  EXPECT_EQ(runs(dir / "good"), 1);  // `eval` verifies many problems in one process
  for (int k = 0; k < 2; ++k) {
    auto env = probe_python(bad.string(), false);
    ASSERT_FALSE(env.ok());
    EXPECT_NE(env.status().message().find("cannot import torch"), std::string::npos) << env.status().to_string();
  }
  EXPECT_EQ(runs(dir / "bad"), 2);  // a failure is probed again (the user may have fixed it)
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(PythonProbe, CallsBegunAtOnceWaitForOneProbe) {
  // `eval` begins its first problems at once: they share the first call's probe.
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("kllm-probe-once-{}", ::getpid());
  const auto slow = counting_python(dir, true);
  {
    std::string text;
    {
      std::ifstream in(slow);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::ofstream(slow) << text.insert(text.find('\n') + 1, "sleep 0.3\n");  // after the shebang
  }
  std::vector<std::thread> calls;
  std::atomic<int> ok{0};
  for (int k = 0; k < 4; ++k) {
    calls.emplace_back([&] {
      if (probe_python(slow.string(), false).ok()) ++ok;
    });
  }
  for (std::thread& t : calls) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(runs(dir), 1);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace kernelllm::harness
