// What the verifier's end-to-end tests share (optimize_test.cpp, verify_session_test.cpp): the
// tests/cases/add problem and candidates, this process's live children (none may be left behind),
// and a copy of the worker package with its zygote patched.
#pragma once

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "harness/workers.h"
#include "kernelllm/harness/verify.h"
#include "harness/zygote.h"
#include "kernelllm/base/file.h"

namespace kernelllm::test_support {

namespace fs = std::filesystem;

inline const fs::path kCases = fs::path(__FILE__).parent_path().parent_path() / "cases";

// Read before any test runs (no assertions possible yet): empty when missing, which every test
// that uses them then fails on.
inline std::string case_file(const fs::path& p) {
  auto r = read_text_file(p);
  return r.ok() ? *r : std::string();
}
inline const std::string kCorrect = case_file(kCases / "add" / "correct_basic.py");
inline const std::string kWrong = case_file(kCases / "add" / "wrong_first_input_twice.py");
inline const std::string kProblem = case_file(kCases / "problems" / "add.py");

// A test's own directory under /tmp (emptied first), with the add problem and its correct and
// wrong candidates written in it: problem.py, good.py, bad.py.
struct CaseFiles {
  fs::path dir, problem, good, bad;
};
inline CaseFiles case_files(const std::string& name) {
  CaseFiles f;
  f.dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(f.dir);
  fs::create_directories(f.dir);
  f.problem = f.dir / "problem.py";
  f.good = f.dir / "good.py";
  f.bad = f.dir / "bad.py";
  std::ofstream(f.problem) << kProblem;
  std::ofstream(f.good) << kCorrect;
  std::ofstream(f.bad) << kWrong;
  return f;
}

// A quick verify on the CPU: no result cache, two trials, no multi-shape check, no timing.
inline harness::VerifyOptions quick_options() {
  harness::VerifyOptions o;
  o.use_cache = false;
  o.multishape = false;
  o.timing = false;
  o.n_trials = 2;
  return o;
}

// The live direct children of this process (every thread's), from /proc, but its zygotes: they
// outlive every verifier by design (harness/zygote.h).
inline std::vector<std::string> live_children() {
  std::vector<std::string> out;
  std::set<std::string> zygotes;
  for (pid_t z : harness::Zygote::pids()) zygotes.insert(std::to_string(z));
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    std::ifstream f(task.path() / "children");
    std::string pid;
    while (f >> pid) {
      std::ifstream stat(fs::path("/proc") / pid / "stat");
      std::string line;
      std::getline(stat, line);
      const size_t close = line.rfind(')');
      if (close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && !zygotes.count(pid)) {
        out.push_back(pid);
      }
    }
  }
  return out;
}

inline bool no_children_within(double seconds) {
  for (int i = 0; i < static_cast<int>(seconds * 10); ++i) {
    if (live_children().empty()) return true;
    ::usleep(100000);
  }
  return live_children().empty();
}

// A copy of the worker package in `pkg` (a zygote is kept per package directory: each copy gets
// one of its own) whose zygote.py has `insert` put in before the first `anchor`. False, with a
// test failure, when the package or the anchor is not found.
inline bool patched_package(const fs::path& pkg, const std::string& anchor, const std::string& insert) {
  auto package = harness::find_package_dir("");
  if (!package.ok()) {
    ADD_FAILURE() << package.status().to_string();
    return false;
  }
  fs::create_directories(pkg);
  fs::copy(*package / "kernelllm", pkg / "kernelllm", fs::copy_options::recursive);
  const fs::path zygote_py = pkg / "kernelllm" / "worker" / "zygote.py";
  auto text = read_text_file(zygote_py.string(), size_t{1} << 20);
  const size_t pos = text.ok() ? text->find(anchor) : std::string::npos;
  if (pos == std::string::npos) {
    ADD_FAILURE() << "zygote.py changed (no '" << anchor << "'): update this test";
    return false;
  }
  std::string patched = *text;
  patched.insert(pos, insert);
  std::ofstream(zygote_py) << patched;
  return true;
}

}  // namespace kernelllm::test_support
