// Problem discovery for `kernelllm eval`: KernelBench roots and plain directories, level and
// shard selection, and the candidate files of a problem in a pre-generated candidates tree.
#include "kernelllm/eval/problems.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <system_error>

#include <fmt/format.h>

#include "kernelllm/eval/kernelbench.h"

namespace kernelllm::eval {
namespace fs = std::filesystem;
namespace {

// The leading decimal number of `name`, if it starts with a digit (saturating on overflow).
std::optional<unsigned long long> leading_number(std::string_view name) {
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  unsigned long long v = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + digits, v);
  if (ec != std::errc()) return ~0ULL;
  return v;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<int> level_of_dir(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "level") != 0 || !all_digits(std::string_view(name).substr(5))) {
    return std::nullopt;
  }
  auto n = leading_number(std::string_view(name).substr(5));
  if (!n || *n > 1000000) return std::nullopt;
  return static_cast<int>(*n);
}

// The .py files directly in `dir` (not starting with '_' or '.'), in problem_name_less order.
Result<std::vector<fs::path>> python_files(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::string name = p.filename().string();
    if (p.extension() != ".py" || name.empty() || name[0] == '_' || name[0] == '.') continue;
    if (!it->is_regular_file(ec)) continue;
    files.push_back(p);
  }
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return problem_name_less(a.filename().string(), b.filename().string()); });
  return files;
}

}  // namespace

bool problem_name_less(std::string_view a, std::string_view b) {
  auto na = leading_number(a);
  auto nb = leading_number(b);
  if (na.has_value() != nb.has_value()) return na.has_value();  // numbered names first
  if (na && *na != *nb) return *na < *nb;
  return a < b;
}

bool is_kernelbench_root(const fs::path& root) {
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && level_of_dir(it->path().filename().string())) return true;
  }
  return false;
}

Result<std::vector<Problem>> discover_problems(const fs::path& root, const std::optional<std::vector<int>>& levels) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return error(ErrorCode::not_found,
                 fmt::format("problems: expected a directory (a KernelBench root with level1/, ... or a directory of "
                             "problem .py files), found {} at {}",
                             fs::exists(root, ec) ? "a file" : "nothing", root.string()));
  }
  fs::path abs_root = fs::absolute(root, ec).lexically_normal();
  std::vector<Problem> out;
  if (is_kernelbench_root(root)) {
    std::vector<int> chosen = levels.value_or(std::vector<int>{1});
    for (int level : chosen) {
      fs::path dir = abs_root / fmt::format("level{}", level);
      if (!fs::is_directory(dir, ec)) {
        return error(ErrorCode::not_found,
                     fmt::format("problems: level {} was asked for but {} has no level{}/ directory", level,
                                 abs_root.string(), level));
      }
      KLLM_ASSIGN_OR_RETURN(std::vector<fs::path> files, python_files(dir));
      for (const fs::path& f : files) {
        std::string stem = f.stem().string();
        out.push_back(Problem{fmt::format("level{}/{}", level, stem), level, stem, f, 0});
      }
    }
  } else {
    if (levels) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("problems: --levels selects level<N>/ directories of a KernelBench root, but {} has none "
                               "(a plain directory of problem files: leave --levels out)",
                               abs_root.string()));
    }
    KLLM_ASSIGN_OR_RETURN(std::vector<fs::path> files, python_files(abs_root));
    for (const fs::path& f : files) {
      std::string stem = f.stem().string();
      out.push_back(Problem{stem, 0, stem, f, 0});
    }
  }
  if (out.empty()) {
    return error(ErrorCode::not_found, fmt::format("problems: expected problem .py files, found none in {}{}",
                                                   abs_root.string(), levels ? " for the chosen levels" : ""));
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].position = static_cast<int>(i);
  return out;
}

Result<std::vector<int>> parse_levels(std::string_view spec) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string_view part = spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    int v = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || v < 1) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("--levels: expected positive integers separated by commas (\"1,2\"), found \"{}\"", spec));
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      return error(ErrorCode::invalid_argument, fmt::format("--levels: level {} is given twice in \"{}\"", v, spec));
    }
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string Shard::to_string() const { return fmt::format("{}/{}", index, count); }

Result<Shard> parse_shard(std::string_view spec) {
  size_t slash = spec.find('/');
  Shard s;
  auto bad = [&] {
    return error(ErrorCode::invalid_argument,
                 fmt::format("--shard: expected i/N with 0 <= i < N (\"0/4\"), found \"{}\"", spec));
  };
  if (slash == std::string_view::npos) return bad();
  std::string_view a = spec.substr(0, slash), b = spec.substr(slash + 1);
  auto r1 = std::from_chars(a.data(), a.data() + a.size(), s.index);
  auto r2 = std::from_chars(b.data(), b.data() + b.size(), s.count);
  if (a.empty() || b.empty() || r1.ec != std::errc() || r2.ec != std::errc() || r1.ptr != a.data() + a.size() ||
      r2.ptr != b.data() + b.size() || s.count < 1 || s.index < 0 || s.index >= s.count) {
    return bad();
  }
  return s;
}

std::vector<Problem> select_shard(const std::vector<Problem>& problems, const Shard& shard) {
  std::vector<Problem> out;
  for (size_t j = 0; j < problems.size(); ++j) {
    if (static_cast<int>(j % static_cast<size_t>(shard.count)) == shard.index) out.push_back(problems[j]);
  }
  return out;
}

Result<std::vector<fs::path>> candidate_files(const fs::path& candidates_root, const Problem& problem) {
  if (is_kernelbench_run_dir(candidates_root)) return kernelbench_candidate_files(candidates_root, problem);
  std::error_code ec;
  fs::path dir = candidates_root / problem.id;
  if (!fs::is_directory(dir, ec)) dir = candidates_root / problem.stem;
  if (!fs::is_directory(dir, ec)) {
    return error(ErrorCode::not_found, fmt::format("candidates: expected a directory {}/{}/ of <sample>.py files for "
                                                   "problem {}, found none",
                                                   candidates_root.string(), problem.stem, problem.id));
  }
  std::map<unsigned long long, fs::path> by_number;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".py" || !it->is_regular_file(ec)) continue;
    std::string stem = p.stem().string();
    if (!all_digits(stem)) {
      return error(ErrorCode::invalid_argument,
                   fmt::format("candidates: expected files named <number>.py in {}, found {}", dir.string(),
                               p.filename().string()));
    }
    unsigned long long n = *leading_number(stem);
    auto [slot, inserted] = by_number.emplace(n, p);
    if (!inserted) {
      return error(ErrorCode::invalid_argument, fmt::format("candidates: {} and {} in {} are both sample {}",
                                                            slot->second.filename().string(), p.filename().string(),
                                                            dir.string(), n));
    }
  }
  if (ec) return error(ErrorCode::io_error, fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  if (by_number.empty()) {
    return error(ErrorCode::invalid_argument,
                 fmt::format("candidates: expected <number>.py files in {}, found none", dir.string()));
  }
  std::vector<fs::path> out;
  for (auto& [n, p] : by_number) out.push_back(fs::absolute(p, ec).lexically_normal());
  return out;
}

}  // namespace kernelllm::eval
