// Model lookup (a local directory, or an HF id found complete in the local HF cache; downloads
// are the callers' part) and loading of config, generation config, tokenizer and mmapped weights.
// Cache layout as huggingface_hub writes it: <cache>/models--org--name/{refs/main, snapshots/<rev>/}.
#include "kernelllm/engine/model.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  std::string s(v);
  // "~/..." as huggingface_hub reads it (os.path.expanduser).
  if ((s == "~" || s.rfind("~/", 0) == 0) && std::string_view(name) != "HOME") {
    if (const char* home = std::getenv("HOME"); home && *home) s = home + s.substr(1);
  }
  return s;
}

// The hub cache directory huggingface_hub would use, and which setting chose it.
std::pair<fs::path, std::string> hub_cache_dir() {
  if (auto v = env("HF_HUB_CACHE")) return {fs::path(*v), "$HF_HUB_CACHE"};
  if (auto v = env("HUGGINGFACE_HUB_CACHE")) return {fs::path(*v), "$HUGGINGFACE_HUB_CACHE"};
  if (auto v = env("HF_HOME")) return {fs::path(*v) / "hub", "$HF_HOME/hub"};
  if (auto v = env("XDG_CACHE_HOME")) return {fs::path(*v) / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"};
  return {fs::path(env("HOME").value_or("")) / ".cache" / "huggingface" / "hub", "~/.cache/huggingface/hub"};
}

// "org/name" or "name", each part of letters, digits, '.', '_', '-' (not starting with '.' or '-').
bool valid_id_part(std::string_view p) {
  if (p.empty() || p.front() == '.' || p.front() == '-') return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

bool is_hub_id(std::string_view id) {
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos) return valid_id_part(id);
  return valid_id_part(id.substr(0, slash)) && valid_id_part(id.substr(slash + 1));
}

bool is_commit_hash(std::string_view rev) {
  return rev.size() == 40 && std::all_of(rev.begin(), rev.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A branch, tag or commit as huggingface_hub stores it under refs/ ("main", "v1.0", "refs/pr/1"):
// relative, no empty, "." or ".." part.
bool valid_revision(std::string_view rev) {
  if (rev.empty() || rev.front() == '/' || rev.back() == '/') return false;
  size_t start = 0;
  while (start <= rev.size()) {
    size_t end = rev.find('/', start);
    if (end == std::string_view::npos) end = rev.size();
    const std::string_view part = rev.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return std::none_of(rev.begin(), rev.end(), [](char c) { return c == '\\' || c == '\0' || c == '\n' || c == '\r'; });
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

// The snapshot a revision names: snapshots/<hash> for a commit hash, else via refs/<revision>.
// nullopt when the ref is missing or names no snapshot directory.
std::optional<fs::path> pinned_snapshot(const fs::path& repo_dir, const std::string& revision) {
  std::error_code ec;
  std::string commit = revision;
  if (!is_commit_hash(revision)) {
    auto ref = read_text_file(repo_dir / "refs" / revision, 4096);
    if (!ref.ok()) return std::nullopt;
    commit = trim(*ref);
    if (!is_commit_hash(commit) && !valid_id_part(commit)) return std::nullopt;  // one plain folder name
  }
  const fs::path dir = repo_dir / "snapshots" / commit;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  return dir;
}

bool has_refs_besides_main(const fs::path& repo_dir) {
  std::error_code ec;
  const fs::path refs = repo_dir / "refs";
  for (fs::recursive_directory_iterator it(refs, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2) && it->path().lexically_relative(refs) != fs::path("main")) return true;
  }
  return false;
}

// The newest complete snapshot (refs/main missing or naming no snapshot: a cache copied by hand).
std::optional<fs::path> newest_complete_snapshot(const fs::path& repo_dir) {
  std::error_code ec;
  std::optional<fs::path> best;
  fs::file_time_type best_time{};
  for (fs::directory_iterator it(repo_dir / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (!it->is_directory(ec2) || !missing_model_files(it->path()).empty()) continue;
    const auto t = fs::last_write_time(it->path(), ec2);
    if (ec2) continue;
    // Newest wins; equal times pick the larger name so the choice does not depend on listing order.
    if (!best || t > best_time || (t == best_time && it->path().filename() > best->filename())) {
      best = it->path();
      best_time = t;
    }
  }
  return best;
}

std::string how_to_get(const std::string& id) {
  return "kernelllm downloads an HF id (org/name) that is not cached, unless offline (--offline, HF_HUB_OFFLINE=1). "
         "To fetch it yourself: `hf download " + id +
         "` (huggingface_hub's CLI) on a machine with access, then copy the cache here or set HF_HOME / HF_HUB_CACHE "
         "to it; or pass a local directory holding config.json, tokenizer.json and *.safetensors.";
}

}  // namespace

bool is_hub_repo_id(std::string_view id) { return id.find('/') != std::string_view::npos && is_hub_id(id); }

std::vector<std::string> missing_model_files(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> missing;
  // exists() follows links: a snapshot entry whose blob is absent is missing.
  auto present = [&](const std::string& name) { return fs::is_regular_file(dir / name, ec); };
  for (const char* name : {"config.json", "tokenizer.json"}) {
    if (!present(name)) missing.emplace_back(name);
  }
  const std::string index = "model.safetensors.index.json";
  if (present(index)) {
    auto weight_map = read_safetensors_index(dir / index);
    if (!weight_map.ok()) {
      missing.push_back(index + " (unreadable: " + weight_map.status().message() + ")");
    } else {
      std::set<std::string> shards;
      for (const auto& [tensor, shard] : *weight_map) shards.insert(shard);
      for (const auto& shard : shards) {
        if (!present(shard)) missing.push_back(shard + " (named by " + index + ")");
      }
    }
  } else if (!present("model.safetensors")) {
    missing.push_back("model.safetensors (or " + index + " and its shards)");
  }
  return missing;
}

Result<fs::path> resolve_model_path(std::string_view name_or_path, std::string_view revision_arg) {
  std::error_code ec;
  const fs::path as_path(name_or_path);
  const std::string revision(revision_arg);
  if (name_or_path.empty()) {
    return error(ErrorCode::invalid_argument, "model: expected a directory or an HF id such as facebook/KernelLLM, "
                                              "found an empty string");
  }
  if (fs::is_directory(as_path, ec)) {
    if (!revision.empty()) {
      return error(ErrorCode::invalid_argument, "model \"" + std::string(name_or_path) + "\" is a local directory; a revision (\"" +
                                                    revision + "\") applies to HF ids only");
    }
    return fs::absolute(as_path, ec);
  }
  if (fs::exists(as_path, ec)) {
    return error(ErrorCode::invalid_argument, "model \"" + std::string(name_or_path) +
                                                  "\": expected a checkpoint directory, found a file");
  }
  if (!revision.empty() && !valid_revision(revision)) {
    return error(ErrorCode::invalid_argument, "revision: expected a branch, tag or commit hash (\"main\", \"v1.0\", "
                                              "40 hex digits), found \"" + revision + "\"");
  }
  const std::string id(name_or_path);
  const std::string shown_id = is_hub_id(id) ? id : std::string("facebook/KernelLLM");
  std::string looked = "  - a local directory \"" + id + "\" (does not exist)\n";
  if (is_hub_id(id)) {
    auto [cache, source] = hub_cache_dir();
    std::string folder = "models--" + id;
    for (size_t pos = folder.find('/'); pos != std::string::npos; pos = folder.find('/', pos + 2)) {
      folder.replace(pos, 1, "--");
    }
    const fs::path repo_dir = cache / folder;
    const std::string rev = revision.empty() ? "main" : revision;
    if (auto snapshot = pinned_snapshot(repo_dir, rev)) {
      const std::vector<std::string> missing = missing_model_files(*snapshot);
      if (missing.empty()) return *snapshot;
      std::string older;
      if (revision.empty()) {
        if (auto other = newest_complete_snapshot(repo_dir)) {
          older = " A complete older snapshot is cached: --revision " + other->filename().string() + " uses it.";
        }
      }
      return error(ErrorCode::not_found,
                   "model \"" + id + "\" (revision " + rev + "): the cached snapshot " + snapshot->string() +
                       " is incomplete, a download was cut off: it lacks " + join(missing, ", ") + "." + older +
                       " Run again online to finish the download, or `hf download " + id +
                       (revision.empty() ? "" : " --revision " + revision) + "`.");
    }
    // A cache copied by hand may lack refs/main (or name a snapshot left behind): then the
    // newest complete snapshot stands for main, unless refs/ names other revisions, which
    // says huggingface_hub fetched those and not main.
    if (revision.empty() && !has_refs_besides_main(repo_dir)) {
      if (auto snapshot = newest_complete_snapshot(repo_dir)) return *snapshot;
    }
    const std::string where = is_commit_hash(rev) ? rev : "<the commit refs/" + rev + " names>";
    looked += "  - the Hugging Face cache (" + source + "): " + (repo_dir / "snapshots").string() + "/" + where + "/" +
              (revision.empty() ? " (else, with no other refs, the newest complete snapshot)" : "") + "\n";
  } else {
    looked += "  - not an HF id of the form org/name, so the Hugging Face cache was not searched\n";
  }
  return error(ErrorCode::not_found, "model \"" + id + "\"" + (revision.empty() ? "" : " (revision " + revision + ")") +
                                         " not found. Looked for:\n" + looked + how_to_get(shown_id));
}

Result<LoadedModel> load_model(std::string_view name_or_path) {
  KLLM_ASSIGN_OR_RETURN(fs::path dir, resolve_model_path(name_or_path));
  KLLM_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::from_file(dir / "config.json"));
  KLLM_ASSIGN_OR_RETURN(GenerationConfig generation, load_generation_config(dir, config));

  const fs::path tokenizer_path = dir / "tokenizer.json";
  auto tokenizer = Tokenizer::from_file(tokenizer_path);
  if (!tokenizer.ok()) {
    const Status& s = tokenizer.status();
    return s.message().find(tokenizer_path.string()) == std::string::npos ? s.with_context(tokenizer_path.string())
                                                                          : s;
  }
  if (tokenizer->vocab_size() > config.vocab_size) {
    return error(ErrorCode::invalid_argument,
                 tokenizer_path.string() + ": expected at most " + std::to_string(config.vocab_size) +
                     " token ids (config.json vocab_size), found " + std::to_string(tokenizer->vocab_size()));
  }

  KLLM_ASSIGN_OR_RETURN(WeightStore weights, WeightStore::open(dir));
  return LoadedModel{dir, std::move(config), std::move(generation), std::move(tokenizer).value(),
                     std::make_unique<WeightStore>(std::move(weights))};
}

}  // namespace kernelllm
