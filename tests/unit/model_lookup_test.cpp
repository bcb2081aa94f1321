// resolve_model_path: local directories, an HF cache layout built in a temp dir (HF_HOME /
// HF_HUB_CACHE set by the test), refs/main vs newest snapshot, and the not-found message.
#include "kernelllm/engine/model.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for one test and restores the old value afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class ModelLookup : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    root_ = fs::temp_directory_path() /
            ("kllm_lookup_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // Makes <hub>/models--org--name/snapshots/<rev>/config.json.
  fs::path add_snapshot(const fs::path& hub, const std::string& folder, const std::string& rev,
                        bool with_config = true) {
    fs::path dir = hub / folder / "snapshots" / rev;
    fs::create_directories(dir);
    if (with_config) std::ofstream(dir / "config.json") << "{}";
    return dir;
  }
  void set_ref(const fs::path& hub, const std::string& folder, const std::string& rev) {
    fs::create_directories(hub / folder / "refs");
    std::ofstream(hub / folder / "refs" / "main") << rev;  // huggingface_hub writes no newline
  }

  fs::path root_;
  ScopedEnv hub_cache_{"HF_HUB_CACHE", std::nullopt};
  ScopedEnv legacy_cache_{"HUGGINGFACE_HUB_CACHE", std::nullopt};
};

TEST_F(ModelLookup, ExistingDirectoryIsUsedDirectly) {
  fs::path dir = root_ / "my-model";
  fs::create_directories(dir);
  auto r = resolve_model_path(dir.string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(fs::equivalent(*r, dir));
  EXPECT_TRUE(r->is_absolute());
}

TEST_F(ModelLookup, FileIsNotAModelDirectory) {
  std::ofstream(root_ / "config.json") << "{}";
  auto r = resolve_model_path((root_ / "config.json").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
  EXPECT_FALSE(resolve_model_path("").ok());
}

TEST_F(ModelLookup, FindsRefsMainSnapshotUnderHfHome) {
  ScopedEnv home("HF_HOME", root_.string());
  const fs::path hub = root_ / "hub";
  const fs::path main_rev = add_snapshot(hub, "models--facebook--KernelLLM", "aaaa1111");
  add_snapshot(hub, "models--facebook--KernelLLM", "bbbb2222");
  set_ref(hub, "models--facebook--KernelLLM", "aaaa1111");
  auto r = resolve_model_path("facebook/KernelLLM");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, main_rev);
}

TEST_F(ModelLookup, FallsBackToNewestSnapshotWithConfig) {
  ScopedEnv home("HF_HOME", root_.string());
  const fs::path hub = root_ / "hub";
  const fs::path old_rev = add_snapshot(hub, "models--org--m", "old");
  const fs::path new_rev = add_snapshot(hub, "models--org--m", "new");
  add_snapshot(hub, "models--org--m", "newest_but_empty", /*with_config=*/false);
  fs::last_write_time(old_rev, fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(new_rev, fs::file_time_type::clock::now() - std::chrono::hours(1));
  set_ref(hub, "models--org--m", "missing-rev");  // refs/main pointing nowhere is ignored
  auto r = resolve_model_path("org/m");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, new_rev);
}

TEST_F(ModelLookup, HfHubCacheTakesPrecedenceOverHfHome) {
  ScopedEnv home("HF_HOME", (root_ / "home").string());
  ScopedEnv cache("HF_HUB_CACHE", (root_ / "cache").string());
  add_snapshot(root_ / "home" / "hub", "models--org--m", "r1");
  const fs::path want = add_snapshot(root_ / "cache", "models--org--m", "r2");
  auto r = resolve_model_path("org/m");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, want);
}

TEST_F(ModelLookup, MissingModelListsWhereItLookedAndHowToGetIt) {
  ScopedEnv home("HF_HOME", root_.string());
  auto r = resolve_model_path("facebook/KernelLLM");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("local directory \"facebook/KernelLLM\""), std::string::npos) << m;
  EXPECT_NE(m.find((root_ / "hub" / "models--facebook--KernelLLM" / "snapshots").string()), std::string::npos) << m;
  EXPECT_NE(m.find("$HF_HOME/hub"), std::string::npos) << m;
  EXPECT_NE(m.find("huggingface-cli download facebook/KernelLLM"), std::string::npos) << m;
  EXPECT_NE(m.find("local directory holding config.json"), std::string::npos) << m;
}

TEST_F(ModelLookup, SnapshotWithoutConfigIsNotFound) {
  ScopedEnv home("HF_HOME", root_.string());
  add_snapshot(root_ / "hub", "models--org--m", "r1", /*with_config=*/false);
  set_ref(root_ / "hub", "models--org--m", "r1");
  auto r = resolve_model_path("org/m");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
}

TEST_F(ModelLookup, DefaultCacheIsUnderHome) {
  ScopedEnv hf_home("HF_HOME", std::nullopt);
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", root_.string());
  const fs::path want = add_snapshot(root_ / ".cache" / "huggingface" / "hub", "models--org--m", "r1");
  auto r = resolve_model_path("org/m");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, want);
}

TEST_F(ModelLookup, NonIdStringsDoNotSearchTheCache) {
  ScopedEnv home("HF_HOME", root_.string());
  for (const char* bad : {"../escape/m", "a/b/c", "org/", "/nonexistent/abs/path"}) {
    auto r = resolve_model_path(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::not_found) << bad;
    EXPECT_NE(r.status().message().find("not an HF id"), std::string::npos) << r.status().message();
  }
}

TEST_F(ModelLookup, LoadModelNamesTheMissingConfigFile) {
  fs::create_directories(root_ / "empty-model");
  auto r = load_model((root_ / "empty-model").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find((root_ / "empty-model" / "config.json").string()), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace kernelllm
