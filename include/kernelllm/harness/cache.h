// Persistent verdict cache (SQLite): key = SHA-256 over (reference source, candidate source,
// profile, device name, torch, triton, verifier version), value = the candidate's result JSON.
// Only final verdicts are stored; infrastructure failures never are.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kernelllm/base/json.h"
#include "kernelllm/base/status.h"

struct sqlite3;

namespace kernelllm::harness {

std::string sha256_hex(std::string_view bytes);

struct CacheKeyParts {
  std::string reference_source;
  std::string candidate_source;
  std::string profile;
  std::string device_name;  // "NVIDIA H100 80GB HBM3" or "cpu"
  std::string torch_version;
  std::string triton_version;
  std::string verifier_version;
  std::string options;      // anything else that changes the verdict (trials, timing on/off)
};
// Each part is length-prefixed before hashing so that no two different tuples collide by concatenation.
std::string cache_key(const CacheKeyParts& parts);

// Default location: $XDG_CACHE_HOME/kernelllm/verify.sqlite or ~/.cache/kernelllm/verify.sqlite.
std::filesystem::path default_cache_path();

class ResultCache {
 public:
  ResultCache() = default;
  ~ResultCache();
  ResultCache(ResultCache&& other) noexcept;
  ResultCache& operator=(ResultCache&& other) noexcept;
  ResultCache(const ResultCache&) = delete;
  ResultCache& operator=(const ResultCache&) = delete;

  static Result<ResultCache> open(const std::filesystem::path& path);

  Result<std::optional<Json>> get(const std::string& key);
  Status put(const std::string& key, const Json& value);

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace kernelllm::harness
