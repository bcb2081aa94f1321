// VerifierPrewarm: the zygote a verify call waits for is started ahead (optimize starts it before
// loading the model), and the verifier set up afterwards takes that one. A binary of its own: no
// zygote of this process may exist before the test.
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "harness/workers.h"
#include "harness/zygote.h"
#include "kernelllm/harness/subprocess.h"
#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {
namespace {

TEST(VerifierPrewarm, StartsTheZygoteThatTheVerifierThenTakes) {
  auto py = probe_python(choose_python(""), false);
  if (!py.ok()) GTEST_SKIP() << "no interpreter with torch: " << py.status().to_string();
  if (!become_subreaper()) GTEST_SKIP() << "PR_SET_CHILD_SUBREAPER refused";
  ASSERT_TRUE(Zygote::pids().empty());
  VerifyOptions o;
  o.devices = {"cpu"};
  { VerifierPrewarm prewarm(o); }  // returns once the zygote is spawned (not yet greeted)
  const std::vector<pid_t> started = Zygote::pids();
  ASSERT_EQ(started.size(), 1u) << "the prewarm started no zygote";
  auto dir = find_package_dir("");
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  // The verifier's own taking (setup(): same interpreter, package and mode) gets the same process:
  // by the interpreter's path when it is a binary that the probe reports as itself, else (a shim,
  // e.g. pyenv's) by the path the probe reports.
  const std::string key = zygote_interpreter(interpreter_path_before_probe(choose_python("")), py->executable);
  std::shared_ptr<Zygote> z = Zygote::shared(key, *dir, /*interpret=*/true);
  ASSERT_TRUE(z);
  ASSERT_TRUE(z->ready(300).ok());
  EXPECT_EQ(Zygote::pids(), started);
}

TEST(VerifierPrewarm, OffWithTheZygote) {
  ::setenv("KERNELLLM_ZYGOTE", "0", 1);
  const size_t before = Zygote::pids().size();
  VerifyOptions o;
  o.devices = {"cpu"};
  { VerifierPrewarm prewarm(o); }
  EXPECT_EQ(Zygote::pids().size(), before);
  ::unsetenv("KERNELLLM_ZYGOTE");
}

}  // namespace
}  // namespace kernelllm::harness
