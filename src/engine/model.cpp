// Model lookup (a local directory, or an HF id found in the local HF cache; never a download)
// and loading of config, generation config, tokenizer and mmapped weights.
// Cache layout as huggingface_hub writes it: <cache>/models--org--name/{refs/main, snapshots/<rev>/}.
#include "kernelllm/engine/model.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kernelllm/base/file.h"

namespace kernelllm {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The hub cache directory huggingface_hub would use, and which setting chose it.
std::pair<fs::path, std::string> hub_cache_dir() {
  if (auto v = env("HF_HUB_CACHE")) return {fs::path(*v), "$HF_HUB_CACHE"};
  if (auto v = env("HUGGINGFACE_HUB_CACHE")) return {fs::path(*v), "$HUGGINGFACE_HUB_CACHE"};
  if (auto v = env("HF_HOME")) return {fs::path(*v) / "hub", "$HF_HOME/hub"};
  if (auto v = env("XDG_CACHE_HOME")) return {fs::path(*v) / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"};
  return {fs::path(env("HOME").value_or("")) / ".cache" / "huggingface" / "hub", "~/.cache/huggingface/hub"};
}

// "org/name" or "name", each part of letters, digits, '.', '_', '-' (not starting with '.').
bool is_hub_id(std::string_view id) {
  auto valid_part = [](std::string_view p) {
    if (p.empty() || p.front() == '.' || p.front() == '-') return false;
    return std::all_of(p.begin(), p.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == '-';
    });
  };
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos) return valid_part(id);
  return valid_part(id.substr(0, slash)) && valid_part(id.substr(slash + 1));
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

bool has_config(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

// refs/main's snapshot when it holds a config.json, else the newest snapshot that does.
std::optional<fs::path> find_snapshot(const fs::path& repo_dir) {
  std::error_code ec;
  const fs::path snapshots = repo_dir / "snapshots";
  auto ref = read_text_file(repo_dir / "refs" / "main", 4096);
  if (ref.ok()) {
    const std::string rev = trim(*ref);
    if (!rev.empty() && rev.find('/') == std::string::npos && rev != "." && rev != ".." &&
        has_config(snapshots / rev)) {
      return snapshots / rev;
    }
  }
  std::optional<fs::path> best;
  fs::file_time_type best_time{};
  for (fs::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || !has_config(it->path())) continue;
    const auto t = fs::last_write_time(it->path(), ec);
    if (ec) continue;
    // Newest wins; equal times pick the larger name so the choice does not depend on listing order.
    if (!best || t > best_time || (t == best_time && it->path().filename() > best->filename())) {
      best = it->path();
      best_time = t;
    }
  }
  return best;
}

}  // namespace

Result<fs::path> resolve_model_path(std::string_view name_or_path) {
  std::error_code ec;
  const fs::path as_path(name_or_path);
  if (name_or_path.empty()) {
    return error(ErrorCode::invalid_argument, "model: expected a directory or an HF id such as facebook/KernelLLM, "
                                              "found an empty string");
  }
  if (fs::is_directory(as_path, ec)) return fs::absolute(as_path, ec);
  if (fs::exists(as_path, ec)) {
    return error(ErrorCode::invalid_argument, "model \"" + std::string(name_or_path) +
                                                  "\": expected a checkpoint directory, found a file");
  }
  const std::string id(name_or_path);
  std::string looked = "  - a local directory \"" + id + "\" (does not exist)\n";
  if (is_hub_id(id)) {
    auto [cache, source] = hub_cache_dir();
    std::string folder = "models--" + id;
    for (size_t pos = folder.find('/'); pos != std::string::npos; pos = folder.find('/', pos + 2)) {
      folder.replace(pos, 1, "--");
    }
    const fs::path repo_dir = cache / folder;
    if (auto snapshot = find_snapshot(repo_dir)) return *snapshot;
    looked += "  - the Hugging Face cache (" + source + "): " + (repo_dir / "snapshots").string() +
              "/<revision>/config.json (via refs/main, else the newest snapshot)\n";
  } else {
    looked += "  - not an HF id of the form org/name, so the Hugging Face cache was not searched\n";
  }
  return error(ErrorCode::not_found,
               "model \"" + id + "\" not found. Looked for:\n" + looked +
                   "kernelllm never downloads models. Get the files with `huggingface-cli download " +
                   (is_hub_id(id) ? id : std::string("facebook/KernelLLM")) +
                   "` on a machine with access (copy the cache here, or set HF_HOME / HF_HUB_CACHE to it), "
                   "or pass a local directory holding config.json, tokenizer.json and *.safetensors.");
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
