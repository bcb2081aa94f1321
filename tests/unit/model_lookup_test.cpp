// resolve_model_path: local directories, an HF cache layout built in a temp dir (HF_HOME /
// HF_HUB_CACHE set by the test), refs/main vs newest snapshot, revisions, incomplete snapshots
// (a download cut off) refused with what they lack, and the not-found message.
#include "kernelllm/engine/model.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

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
  // Makes <hub>/models--org--name/snapshots/<rev>/ with config.json, tokenizer.json and
  // model.safetensors (complete as far as lookup goes), or empty.
  fs::path add_snapshot(const fs::path& hub, const std::string& folder, const std::string& rev,
                        bool complete = true) {
    fs::path dir = hub / folder / "snapshots" / rev;
    fs::create_directories(dir);
    if (complete) {
      for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) std::ofstream(dir / f) << "{}";
    }
    return dir;
  }
  void set_ref(const fs::path& hub, const std::string& folder, const std::string& rev,
               const std::string& name = "main") {
    fs::create_directories((hub / folder / "refs" / name).parent_path());
    std::ofstream(hub / folder / "refs" / name) << rev;  // huggingface_hub writes no newline
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

TEST_F(ModelLookup, FallsBackToNewestCompleteSnapshot) {
  ScopedEnv home("HF_HOME", root_.string());
  const fs::path hub = root_ / "hub";
  const fs::path old_rev = add_snapshot(hub, "models--org--m", "old");
  const fs::path new_rev = add_snapshot(hub, "models--org--m", "new");
  add_snapshot(hub, "models--org--m", "newest_but_empty", /*complete=*/false);
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
  EXPECT_NE(m.find("`hf download facebook/KernelLLM`"), std::string::npos) << m;
  EXPECT_EQ(m.find("huggingface-cli"), std::string::npos) << m;
  EXPECT_NE(m.find("HF_HUB_OFFLINE"), std::string::npos) << m;
  EXPECT_NE(m.find("local directory holding config.json"), std::string::npos) << m;
}

TEST_F(ModelLookup, SnapshotWithoutConfigIsNotFound) {
  ScopedEnv home("HF_HOME", root_.string());
  add_snapshot(root_ / "hub", "models--org--m", "r1", /*complete=*/false);
  set_ref(root_ / "hub", "models--org--m", "r1");
  auto r = resolve_model_path("org/m");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  EXPECT_NE(r.status().message().find("incomplete"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().message();
}

// A download cut off between shards: refs/main names a snapshot with the index and one of two
// shards. It is never used; the error names the missing shard and the older complete snapshot.
TEST_F(ModelLookup, IncompleteShardedSnapshotIsRefusedNamingWhatItLacks) {
  ScopedEnv home("HF_HOME", root_.string());
  const fs::path hub = root_ / "hub";
  const fs::path old_rev = add_snapshot(hub, "models--org--m", "1111111111111111111111111111111111111111");
  const fs::path cut = add_snapshot(hub, "models--org--m", "2222222222222222222222222222222222222222", false);
  for (const char* f : {"config.json", "tokenizer.json", "model-00001-of-00002.safetensors"}) std::ofstream(cut / f) << "{}";
  // A snapshot entry is a link to a blob; one whose blob never arrived is missing too.
  fs::create_symlink("../../blobs/never-written", cut / "model-00002-of-00002.safetensors");
  std::ofstream(cut / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  set_ref(hub, "models--org--m", cut.filename().string());
  EXPECT_EQ(missing_model_files(cut), std::vector<std::string>{
                                          "model-00002-of-00002.safetensors (named by model.safetensors.index.json)"});
  auto r = resolve_model_path("org/m");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::not_found);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find(cut.string() + " is incomplete"), std::string::npos) << m;
  EXPECT_NE(m.find("model-00002-of-00002.safetensors"), std::string::npos) << m;
  EXPECT_EQ(m.find("model-00001-of-00002.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("--revision " + old_rev.filename().string()), std::string::npos) << m;
  // The complete one is used when asked for by its commit.
  auto pinned = resolve_model_path("org/m", old_rev.filename().string());
  ASSERT_TRUE(pinned.ok()) << pinned.status().to_string();
  EXPECT_EQ(*pinned, old_rev);
}

TEST_F(ModelLookup, RevisionsGoThroughRefsOrNameACommit) {
  ScopedEnv home("HF_HOME", root_.string());
  const fs::path hub = root_ / "hub";
  const std::string a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  const fs::path main_dir = add_snapshot(hub, "models--org--m", a);
  const fs::path v1_dir = add_snapshot(hub, "models--org--m", b);
  set_ref(hub, "models--org--m", a);
  set_ref(hub, "models--org--m", b, "v1");
  set_ref(hub, "models--org--m", b, "refs/pr/1");
  EXPECT_EQ(resolve_model_path("org/m").value(), main_dir);
  EXPECT_EQ(resolve_model_path("org/m", "main").value(), main_dir);
  EXPECT_EQ(resolve_model_path("org/m", "v1").value(), v1_dir);
  EXPECT_EQ(resolve_model_path("org/m", "refs/pr/1").value(), v1_dir);
  EXPECT_EQ(resolve_model_path("org/m", b).value(), v1_dir);
  // A revision that is not cached is not found (no fallback to another snapshot).
  auto missing = resolve_model_path("org/m", "v2");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  EXPECT_NE(missing.status().message().find("(revision v2) not found"), std::string::npos) << missing.status().message();
  for (const char* bad : {"../x", "/abs", "a//b", "v1/", ".."}) {
    auto r = resolve_model_path("org/m", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument) << bad;
  }
  // Only v1 fetched (refs/v1, no refs/main): main is not cached, v1 does not stand in for it.
  const fs::path only_v1 = add_snapshot(hub, "models--org--n", b);
  set_ref(hub, "models--org--n", b, "v1");
  EXPECT_EQ(resolve_model_path("org/n", "v1").value(), only_v1);
  EXPECT_EQ(resolve_model_path("org/n").status().code(), ErrorCode::not_found);
  // A revision names a version of an HF id, not of a local directory.
  auto local = resolve_model_path(main_dir.string(), "v1");
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), ErrorCode::invalid_argument);
}

TEST_F(ModelLookup, MissingModelFilesOfADirectory) {
  const fs::path dir = root_ / "m";
  fs::create_directories(dir);
  EXPECT_EQ(missing_model_files(dir),
            (std::vector<std::string>{"config.json", "tokenizer.json",
                                      "model.safetensors (or model.safetensors.index.json and its shards)"}));
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"}) std::ofstream(dir / f) << "{}";
  EXPECT_TRUE(missing_model_files(dir).empty());
  std::ofstream(dir / "model.safetensors.index.json") << "not json";
  ASSERT_EQ(missing_model_files(dir).size(), 1u);
  EXPECT_NE(missing_model_files(dir)[0].find("unreadable"), std::string::npos);
}

TEST(HubRepoId, OnlyOrgSlashName) {
  EXPECT_TRUE(is_hub_repo_id("facebook/KernelLLM"));
  EXPECT_TRUE(is_hub_repo_id("org/tiny-1.0_b"));
  for (const char* no : {"KernelLLM", "./org/m", "org/m/x", "/org/m", "org/", "org/.m", "-o/m", ""}) {
    EXPECT_FALSE(is_hub_repo_id(no)) << no;
  }
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
