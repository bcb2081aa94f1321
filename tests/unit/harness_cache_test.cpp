// Result cache: SHA-256 test vectors, key sensitivity to every part, SQLite round trip.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "kernelllm/harness/cache.h"

namespace kernelllm::harness {
namespace {

TEST(Sha256, MatchesFipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(CacheKey, ChangesWithEveryPartAndResistsConcatenationCollisions) {
  CacheKeyParts base{"ref", "cand", "strict", "cpu", "2.13", "3.9", "verify-1", ""};
  std::string k = cache_key(base);
  EXPECT_EQ(k, cache_key(base));
  for (int i = 0; i < 8; ++i) {
    CacheKeyParts p = base;
    std::string* fields[] = {&p.reference_source, &p.candidate_source, &p.profile, &p.device_name,
                             &p.torch_version,    &p.triton_version,   &p.verifier_version, &p.options};
    *fields[i] += "x";
    EXPECT_NE(cache_key(p), k) << "part " << i;
  }
  CacheKeyParts a = base, b = base;
  a.reference_source = "refc";
  a.candidate_source = "and";
  EXPECT_NE(cache_key(a), cache_key(b));
}

TEST(ResultCache, StoresAndReadsBack) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kllm-cache-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto c = ResultCache::open(dir / "sub" / "v.sqlite");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto miss = c->get("k1");
    ASSERT_TRUE(miss.ok());
    EXPECT_FALSE(miss->has_value());
    ASSERT_TRUE(c->put("k1", Json{{"verdict", "correct"}}).ok());
    ASSERT_TRUE(c->put("k1", Json{{"verdict", "cheat"}}).ok());
  }
  auto c = ResultCache::open(dir / "sub" / "v.sqlite");
  ASSERT_TRUE(c.ok());
  auto hit = c->get("k1");
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->has_value());
  EXPECT_EQ((**hit)["verdict"], "cheat");
  std::filesystem::remove_all(dir);
}

TEST(ResultCache, UnwritableLocationIsAnError) {
  auto c = ResultCache::open("/proc/kernelllm-no/such/verify.sqlite");
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace kernelllm::harness
