// The eval run store on SQLite: schema, config check, problems, samples (files written before
// their rows commit), verdicts and the verifications log. WAL with synchronous=NORMAL: a
// committed row survives the process being killed; each write is its own transaction.
#include "kernelllm/eval/run_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "kernelllm/harness/cache.h"

namespace kernelllm::eval {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStoreFile = "run.sqlite";
constexpr const char* kLockFile = "run.lock";

// Takes the run directory's writer lock (an flock, released when the process dies) and leaves
// this process's id in the file for the next one's message.
Result<int> lock_run_dir(const fs::path& dir) {
  const fs::path file = dir / kLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return error(ErrorCode::io_error, fmt::format("cannot open {}: {}", file.string(), std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return error(ErrorCode::invalid_argument,
                   fmt::format("the run {} is in use by another kernelllm process (pid {}); wait for it to end or use "
                               "another --out",
                               dir.string(), pid));
    }
    return error(ErrorCode::io_error, fmt::format("cannot lock {}: {}", file.string(), std::strerror(err)));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; only the other process's message loses it.
  }
  return fd;
}

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) st_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Status prepared() const {
    if (st_) return {};
    return error(ErrorCode::io_error, std::string("run store: ") + sqlite3_errmsg(db_));
  }
  void bind(int i, const std::string& s) { sqlite3_bind_text(st_, i, s.c_str(), static_cast<int>(s.size()), SQLITE_TRANSIENT); }
  void bind(int i, int64_t v) { sqlite3_bind_int64(st_, i, v); }
  void bind(int i, std::optional<double> v) {
    if (v) sqlite3_bind_double(st_, i, *v);
    else sqlite3_bind_null(st_, i);
  }
  int step() { return sqlite3_step(st_); }
  Status done() {
    int rc = step();
    if (rc == SQLITE_DONE) return {};
    return error(ErrorCode::io_error, std::string("run store write: ") + sqlite3_errmsg(db_));
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(st_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t integer(int col) const { return sqlite3_column_int64(st_, col); }
  std::optional<double> real(int col) const {
    if (sqlite3_column_type(st_, col) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(st_, col);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

Status write_file_atomic(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) return error(ErrorCode::io_error, fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path, ec);
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  return {};
}

std::string short_json(const Json& j) {
  std::string s = j.dump();
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

}  // namespace

namespace {

std::optional<std::string> difference_at(const std::string& prefix, const Json& stored, const Json& given,
                                         const std::vector<std::string>& ignore) {
  std::set<std::string> keys;
  for (auto it = stored.begin(); it != stored.end(); ++it) keys.insert(it.key());
  for (auto it = given.begin(); it != given.end(); ++it) keys.insert(it.key());
  for (const std::string& key : keys) {
    std::string name = prefix.empty() ? key : prefix + "." + key;
    if (std::find(ignore.begin(), ignore.end(), name) != ignore.end()) continue;
    bool in_stored = stored.contains(key), in_given = given.contains(key);
    if (in_stored && in_given && stored[key] == given[key]) continue;
    if (in_stored && in_given && stored[key].is_object() && given[key].is_object()) {
      return difference_at(name, stored[key], given[key], ignore);
    }
    return fmt::format("{}: the run has {}, the options give {}", name, in_stored ? short_json(stored[key]) : "nothing",
                       in_given ? short_json(given[key]) : "nothing");
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> config_difference(const Json& stored, const Json& given, const std::vector<std::string>& ignore) {
  return difference_at("", stored, given, ignore);
}

RunStore::~RunStore() {
  if (db_) sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}
RunStore::RunStore(RunStore&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      dir_(std::move(other.dir_)),
      config_(std::move(other.config_)) {}
RunStore& RunStore::operator=(RunStore&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close(db_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    db_ = std::exchange(other.db_, nullptr);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    dir_ = std::move(other.dir_);
    config_ = std::move(other.config_);
  }
  return *this;
}

Status RunStore::exec(const char* sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return {};
  std::string msg = err ? err : "unknown";
  sqlite3_free(err);
  return error(ErrorCode::io_error, fmt::format("run store {}: {}", (dir_ / kStoreFile).string(), msg));
}

Status RunStore::init_schema() {
  KLLM_RETURN_IF_ERROR(exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"));
  return exec(
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS problems (id TEXT PRIMARY KEY, position INTEGER NOT NULL, level INTEGER NOT NULL,"
      " stem TEXT NOT NULL, file TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS samples (problem TEXT NOT NULL, sample INTEGER NOT NULL, candidate_file TEXT NOT NULL,"
      " completion_file TEXT NOT NULL, origin TEXT NOT NULL, extraction TEXT NOT NULL, sha256 TEXT NOT NULL,"
      " PRIMARY KEY (problem, sample));"
      "CREATE TABLE IF NOT EXISTS verdicts (problem TEXT NOT NULL, sample INTEGER NOT NULL, profile TEXT NOT NULL,"
      " verdict TEXT NOT NULL, rule TEXT NOT NULL, message TEXT NOT NULL, speedup REAL, result TEXT NOT NULL,"
      " PRIMARY KEY (problem, sample, profile));"
      "CREATE TABLE IF NOT EXISTS verifications (seq INTEGER PRIMARY KEY AUTOINCREMENT, problem TEXT NOT NULL,"
      " sample INTEGER NOT NULL, profile TEXT NOT NULL, verdict TEXT NOT NULL, cached INTEGER NOT NULL);");
}

Result<RunStore> RunStore::open_or_create(const fs::path& run_dir, const Json& config) {
  if (!config.is_object()) return error(ErrorCode::invalid_argument, "run store: the config must be a JSON object");
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot create the run directory {}: {}", run_dir.string(), ec.message()));
  RunStore s;
  s.dir_ = fs::absolute(run_dir, ec).lexically_normal();
  KLLM_ASSIGN_OR_RETURN(s.lock_fd_, lock_run_dir(s.dir_));
  fs::path file = s.dir_ / kStoreFile;
  if (sqlite3_open_v2(file.c_str(), &s.db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    return error(ErrorCode::io_error, fmt::format("run store {}: {}", file.string(), s.db_ ? sqlite3_errmsg(s.db_) : "out of memory"));
  }
  sqlite3_busy_timeout(s.db_, 10000);
  KLLM_RETURN_IF_ERROR(s.init_schema());
  Statement get(s.db_, "SELECT value FROM meta WHERE key = 'config'");
  KLLM_RETURN_IF_ERROR(get.prepared());
  if (get.step() == SQLITE_ROW) {
    KLLM_ASSIGN_OR_RETURN(Json stored, parse_json(get.text(0), file.string() + " config"));
    if (auto diff = config_difference(stored, config, kRunConfigFreeKeys)) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("{} was started with other options ({}); use the same options to resume it, or another --out",
                               s.dir_.string(), *diff));
    }
    s.config_ = std::move(stored);
    return s;
  }
  Statement put(s.db_, "INSERT INTO meta (key, value) VALUES ('config', ?1), ('schema', ?2)");
  KLLM_RETURN_IF_ERROR(put.prepared());
  put.bind(1, config.dump());
  put.bind(2, std::to_string(kRunStoreSchema));
  KLLM_RETURN_IF_ERROR(put.done());
  s.config_ = config;
  return s;
}

Result<RunStore> RunStore::open_existing(const fs::path& run_dir) {
  std::error_code ec;
  fs::path file = run_dir / kStoreFile;
  if (!fs::is_regular_file(file, ec)) {
    return error(ErrorCode::not_found, fmt::format("expected an eval run store {}, found none", file.string()));
  }
  RunStore s;
  s.dir_ = fs::absolute(run_dir, ec).lexically_normal();
  if (sqlite3_open_v2(file.c_str(), &s.db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    return error(ErrorCode::io_error, fmt::format("run store {}: {}", file.string(), s.db_ ? sqlite3_errmsg(s.db_) : "out of memory"));
  }
  sqlite3_busy_timeout(s.db_, 10000);
  KLLM_RETURN_IF_ERROR(s.init_schema());
  Statement get(s.db_, "SELECT key, value FROM meta");
  KLLM_RETURN_IF_ERROR(get.prepared());
  std::optional<Json> config;
  while (get.step() == SQLITE_ROW) {
    std::string key = get.text(0);
    if (key == "schema" && get.text(1) != std::to_string(kRunStoreSchema)) {
      return error(ErrorCode::unsupported, fmt::format("run store {}: expected schema {}, found {}", file.string(),
                                                       kRunStoreSchema, get.text(1)));
    }
    if (key == "config") {
      KLLM_ASSIGN_OR_RETURN(Json c, parse_json(get.text(1), file.string() + " config"));
      config = std::move(c);
    }
  }
  if (!config) return error(ErrorCode::parse_error, fmt::format("run store {}: expected a recorded config, found none", file.string()));
  s.config_ = std::move(*config);
  return s;
}

Status RunStore::set_problems(const std::vector<Problem>& problems) {
  KLLM_ASSIGN_OR_RETURN(std::vector<Problem> stored, this->problems());
  if (!stored.empty()) {
    for (size_t i = 0; i < std::max(stored.size(), problems.size()); ++i) {
      const Problem* a = i < stored.size() ? &stored[i] : nullptr;
      const Problem* b = i < problems.size() ? &problems[i] : nullptr;
      if (a && b && a->id == b->id && a->file == b->file && a->position == b->position && a->level == b->level) continue;
      return error(ErrorCode::invalid_argument,
                   fmt::format("{}: the problem set changed since the run started (problem {}: the run has {}, the "
                               "problems directory gives {}); use another --out",
                               dir_.string(), i, a ? a->id : "nothing", b ? b->id : "nothing"));
    }
    return {};
  }
  KLLM_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  for (const Problem& p : problems) {
    Statement ins(db_, "INSERT INTO problems (id, position, level, stem, file) VALUES (?1, ?2, ?3, ?4, ?5)");
    Status s = ins.prepared();
    if (s.ok()) {
      ins.bind(1, p.id);
      ins.bind(2, int64_t{p.position});
      ins.bind(3, int64_t{p.level});
      ins.bind(4, p.stem);
      ins.bind(5, p.file.string());
      s = ins.done();
    }
    if (!s.ok()) {
      (void)exec("ROLLBACK");
      return s;
    }
  }
  return exec("COMMIT");
}

Result<std::vector<Problem>> RunStore::problems() const {
  Statement q(db_, "SELECT id, position, level, stem, file FROM problems ORDER BY position, id");
  KLLM_RETURN_IF_ERROR(q.prepared());
  std::vector<Problem> out;
  while (q.step() == SQLITE_ROW) {
    out.push_back(Problem{q.text(0), static_cast<int>(q.integer(2)), q.text(3), fs::path(q.text(4)),
                          static_cast<int>(q.integer(1))});
  }
  return out;
}

Result<std::vector<StoredSample>> RunStore::samples(const std::string& problem_id) const {
  Statement q(db_,
              "SELECT sample, candidate_file, completion_file, origin, extraction, sha256 FROM samples WHERE problem = ?1 "
              "ORDER BY sample");
  KLLM_RETURN_IF_ERROR(q.prepared());
  q.bind(1, problem_id);
  std::vector<StoredSample> out;
  while (q.step() == SQLITE_ROW) {
    out.push_back(StoredSample{static_cast<int>(q.integer(0)), q.text(1), q.text(2), q.text(3), q.text(4), q.text(5)});
  }
  return out;
}

Status RunStore::add_samples(const Problem& problem, const std::vector<NewSample>& samples) {
  KLLM_ASSIGN_OR_RETURN(std::vector<StoredSample> existing, this->samples(problem.id));
  if (!existing.empty()) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("run store: problem {} already has {} sample(s)", problem.id, existing.size()));
  }
  std::vector<StoredSample> rows;
  for (size_t i = 0; i < samples.size(); ++i) {
    const NewSample& ns = samples[i];
    StoredSample row;
    row.sample = static_cast<int>(i);
    row.candidate_file = fmt::format("candidates/{}/{}.py", problem.id, i);
    KLLM_RETURN_IF_ERROR(write_file_atomic(dir_ / row.candidate_file, ns.code));
    if (!ns.completion.empty()) {
      row.completion_file = fmt::format("candidates/{}/{}.completion.txt", problem.id, i);
      KLLM_RETURN_IF_ERROR(write_file_atomic(dir_ / row.completion_file, ns.completion));
    }
    row.origin = ns.origin;
    row.extraction = ns.extraction;
    row.sha256 = harness::sha256_hex(ns.code);
    rows.push_back(std::move(row));
  }
  KLLM_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  Status s;
  {
    Statement known(db_, "SELECT 1 FROM problems WHERE id = ?1");
    s = known.prepared();
    if (s.ok()) {
      known.bind(1, problem.id);
      if (known.step() != SQLITE_ROW) {
        s = error(ErrorCode::invalid_argument, fmt::format("run store: problem {} is not part of this run", problem.id));
      }
    }
  }
  for (size_t i = 0; s.ok() && i < rows.size(); ++i) {
    const StoredSample& r = rows[i];
    Statement ins(db_,
                  "INSERT INTO samples (problem, sample, candidate_file, completion_file, origin, extraction, sha256) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    s = ins.prepared();
    if (!s.ok()) break;
    ins.bind(1, problem.id);
    ins.bind(2, int64_t{r.sample});
    ins.bind(3, r.candidate_file);
    ins.bind(4, r.completion_file);
    ins.bind(5, r.origin);
    ins.bind(6, r.extraction);
    ins.bind(7, r.sha256);
    s = ins.done();
  }
  if (!s.ok()) {
    (void)exec("ROLLBACK");
    return s;
  }
  return exec("COMMIT");
}

Result<std::vector<StoredVerdict>> RunStore::verdicts(const std::string& problem_id) const {
  Statement q(db_,
              "SELECT problem, sample, profile, verdict, rule, message, speedup, result FROM verdicts WHERE problem = ?1 "
              "ORDER BY sample, profile");
  KLLM_RETURN_IF_ERROR(q.prepared());
  q.bind(1, problem_id);
  std::vector<StoredVerdict> out;
  while (q.step() == SQLITE_ROW) {
    KLLM_ASSIGN_OR_RETURN(Json result, parse_json(q.text(7), "run store verdict of " + problem_id));
    out.push_back(StoredVerdict{q.text(0), static_cast<int>(q.integer(1)), q.text(2), q.text(3), q.text(4), q.text(5),
                                q.real(6), std::move(result)});
  }
  return out;
}

Status RunStore::put_verdict(const StoredVerdict& v, std::optional<bool> log) {
  KLLM_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  Statement ins(db_,
                "INSERT INTO verdicts (problem, sample, profile, verdict, rule, message, speedup, result) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  Status s = ins.prepared();
  if (s.ok()) {
    ins.bind(1, v.problem);
    ins.bind(2, int64_t{v.sample});
    ins.bind(3, v.profile);
    ins.bind(4, v.verdict);
    ins.bind(5, v.rule);
    ins.bind(6, v.message);
    ins.bind(7, v.speedup);
    ins.bind(8, v.result.dump());
    if (ins.step() != SQLITE_DONE) {
      s = error(ErrorCode::invalid_argument, fmt::format("run store: cannot record the {} verdict of {} sample {}: {}",
                                                         v.profile, v.problem, v.sample, sqlite3_errmsg(db_)));
    }
  }
  if (s.ok() && log) {
    Statement logged(db_, "INSERT INTO verifications (problem, sample, profile, verdict, cached) VALUES (?1, ?2, ?3, ?4, ?5)");
    s = logged.prepared();
    if (s.ok()) {
      logged.bind(1, v.problem);
      logged.bind(2, int64_t{v.sample});
      logged.bind(3, v.profile);
      logged.bind(4, v.verdict);
      logged.bind(5, int64_t{*log ? 1 : 0});
      s = logged.done();
    }
  }
  if (!s.ok()) {
    (void)exec("ROLLBACK");
    return s;
  }
  return exec("COMMIT");
}

Result<int64_t> RunStore::verdict_count() const {
  Statement q(db_, "SELECT COUNT(*) FROM verdicts");
  KLLM_RETURN_IF_ERROR(q.prepared());
  return q.step() == SQLITE_ROW ? q.integer(0) : int64_t{0};
}

Result<std::vector<VerificationRow>> RunStore::verifications() const {
  Statement q(db_, "SELECT seq, problem, sample, profile, verdict, cached FROM verifications ORDER BY seq");
  KLLM_RETURN_IF_ERROR(q.prepared());
  std::vector<VerificationRow> out;
  while (q.step() == SQLITE_ROW) {
    out.push_back(VerificationRow{q.integer(0), q.text(1), static_cast<int>(q.integer(2)), q.text(3), q.text(4), q.integer(5) != 0});
  }
  return out;
}

Status RunStore::add_verification_rows(const std::vector<VerificationRow>& rows) {
  KLLM_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  Status s;
  for (const VerificationRow& r : rows) {
    Statement ins(db_, "INSERT INTO verifications (problem, sample, profile, verdict, cached) VALUES (?1, ?2, ?3, ?4, ?5)");
    s = ins.prepared();
    if (!s.ok()) break;
    ins.bind(1, r.problem);
    ins.bind(2, int64_t{r.sample});
    ins.bind(3, r.profile);
    ins.bind(4, r.verdict);
    ins.bind(5, int64_t{r.cached ? 1 : 0});
    s = ins.done();
    if (!s.ok()) break;
  }
  if (!s.ok()) {
    (void)exec("ROLLBACK");
    return s;
  }
  return exec("COMMIT");
}

Result<std::vector<ProblemOutcome>> RunStore::outcomes(const std::vector<std::string>& profiles, Json* left_out) const {
  KLLM_ASSIGN_OR_RETURN(std::vector<Problem> problems, this->problems());
  std::vector<ProblemOutcome> out;
  for (const Problem& p : problems) {
    KLLM_ASSIGN_OR_RETURN(std::vector<StoredSample> samples, this->samples(p.id));
    if (samples.empty() && left_out) {
      left_out->push_back(Json{{"id", p.id}, {"why", "no samples yet"}});
      continue;
    }
    if (samples.empty()) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("run {} is incomplete: problem {} has no samples yet; rerun `kernelllm eval` with the "
                               "same options to finish it",
                               dir_.string(), p.id));
    }
    KLLM_ASSIGN_OR_RETURN(std::vector<StoredVerdict> verdicts, this->verdicts(p.id));
    ProblemOutcome po;
    po.id = p.id;
    po.level = p.level;
    po.problem_file = p.file.string();
    size_t missing = 0;  // (only with left_out: else the first one is the error)
    for (const std::string& profile : profiles) {
      std::vector<SampleOutcome>& list = po.samples[profile];
      for (const StoredSample& s : samples) {
        const StoredVerdict* found = nullptr;
        for (const StoredVerdict& v : verdicts) {
          if (v.sample == s.sample && v.profile == profile) found = &v;
        }
        if (!found && left_out) {
          ++missing;
          continue;
        }
        if (!found) {
          return error(ErrorCode::invalid_argument,
                       fmt::format("run {} is incomplete: problem {} sample {} has no {} verdict; rerun `kernelllm eval` "
                                   "with the same options to finish it",
                                   dir_.string(), p.id, s.sample, profile));
        }
        SampleOutcome so;
        so.sample = s.sample;
        so.candidate_file = s.candidate_file;
        so.verdict = found->verdict;
        so.rule = found->rule;
        so.message = found->message;
        so.correct = found->verdict == "correct";
        so.speedup = found->speedup;
        // The absolute times behind the speedup, from the verifier's stored timing.
        const Json timing = found->result.is_object() ? found->result.value("timing", Json(nullptr)) : Json(nullptr);
        if (so.speedup && timing.is_object() && timing.contains("median_ms") && timing["median_ms"].is_number()) {
          so.candidate_ms = timing["median_ms"].get<double>();
          so.reference_ms = *so.speedup * *so.candidate_ms;
        }
        const Json shapes = found->result.is_object() ? found->result.value("multishape", Json(nullptr)) : Json(nullptr);
        if (shapes.is_object() && shapes.contains("verdict") && shapes["verdict"].is_string()) {
          so.multishape = shapes["verdict"].get<std::string>();
        }
        list.push_back(std::move(so));
      }
    }
    if (missing > 0) {
      const size_t all = samples.size() * profiles.size();
      left_out->push_back(Json{{"id", p.id}, {"why", fmt::format("{} of {} verdicts", all - missing, all)}});
      continue;
    }
    out.push_back(std::move(po));
  }
  return out;
}

}  // namespace kernelllm::eval
