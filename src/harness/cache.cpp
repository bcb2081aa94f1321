// Verdict cache: SHA-256 (FIPS 180-4) keys over length-prefixed parts, stored in SQLite.
#include "kernelllm/harness/cache.h"

#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace kernelllm::harness {
namespace {

constexpr std::array<uint32_t, 64> kK = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<uint32_t, 8>& h, const unsigned char* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) | (uint32_t{block[4 * i + 2]} << 8) |
           uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[static_cast<size_t>(i)] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string msg(bytes);
  uint64_t bit_len = static_cast<uint64_t>(bytes.size()) * 8;
  msg.push_back(static_cast<char>(0x80));
  while (msg.size() % 64 != 56) msg.push_back('\0');
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>((bit_len >> (8 * i)) & 0xFF));
  for (size_t off = 0; off < msg.size(); off += 64) compress(h, reinterpret_cast<const unsigned char*>(msg.data() + off));
  std::string out;
  for (uint32_t v : h) out += fmt::format("{:08x}", v);
  return out;
}

std::string cache_key(const CacheKeyParts& p) {
  std::string buf;
  for (const std::string* s : {&p.reference_source, &p.candidate_source, &p.profile, &p.device_name, &p.torch_version,
                               &p.triton_version, &p.verifier_version, &p.options}) {
    buf += fmt::format("{}:", s->size());
    buf += *s;
  }
  return sha256_hex(buf);
}

std::filesystem::path default_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "kernelllm" / "verify.sqlite";
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "kernelllm" / "verify.sqlite";
}

ResultCache::~ResultCache() {
  if (db_) sqlite3_close(db_);
}
ResultCache::ResultCache(ResultCache&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
ResultCache& ResultCache::operator=(ResultCache&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Result<ResultCache> ResultCache::open(const std::filesystem::path& path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  ResultCache c;
  if (sqlite3_open_v2(path.c_str(), &c.db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = c.db_ ? sqlite3_errmsg(c.db_) : "out of memory";
    return error(ErrorCode::io_error, fmt::format("verify cache {}: {}", path.string(), msg));
  }
  sqlite3_busy_timeout(c.db_, 5000);
  char* err = nullptr;
  if (sqlite3_exec(c.db_,
                   "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                   "created REAL NOT NULL DEFAULT (julianday('now')))",
                   nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    return error(ErrorCode::io_error, fmt::format("verify cache {}: {}", path.string(), msg));
  }
  return c;
}

Result<std::optional<Json>> ResultCache::get(const std::string& key) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM verdicts WHERE key = ?1", -1, &st, nullptr) != SQLITE_OK) {
    return error(ErrorCode::io_error, std::string("verify cache: ") + sqlite3_errmsg(db_));
  }
  sqlite3_bind_text(st, 1, key.c_str(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  std::optional<Json> out;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(st, 0);
    auto j = parse_json(text ? reinterpret_cast<const char*>(text) : "", "verify cache entry");
    if (j.ok()) out = std::move(*j);  // a corrupt entry reads as a miss and is overwritten
  }
  sqlite3_finalize(st);
  return out;
}

Status ResultCache::put(const std::string& key, const Json& value) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO verdicts (key, value) VALUES (?1, ?2)", -1, &st, nullptr) != SQLITE_OK) {
    return error(ErrorCode::io_error, std::string("verify cache: ") + sqlite3_errmsg(db_));
  }
  std::string text = value.dump();
  sqlite3_bind_text(st, 1, key.c_str(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return error(ErrorCode::io_error, std::string("verify cache write: ") + sqlite3_errmsg(db_));
  return {};
}

}  // namespace kernelllm::harness
