// Eval problem sets: a KernelBench root (level1/, level2/, ... selected by level) or a plain
// directory of problem files, listed in a deterministic order; `--levels` and `--shard i/N`
// parsing; and the pre-generated candidate files of a problem (`DIR/<stem>/<sample>.py`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernelllm/base/status.h"

namespace kernelllm::eval {

struct Problem {
  std::string id;              // "level1/19_ReLU" under a KernelBench root, else the file stem "19_ReLU"
  int level = 0;               // 0 for a plain directory
  std::string stem;            // the file name without .py
  std::filesystem::path file;  // absolute
  int position = 0;            // index in the whole sorted set (before sharding)
};

// File names in "numeric prefix" order: names starting with digits sort by that number first
// ("2_x" < "10_x"), then by the whole name (bytes); names without a number come after them.
bool problem_name_less(std::string_view a, std::string_view b);

// Whether `root` holds at least one `level<N>` directory.
bool is_kernelbench_root(const std::filesystem::path& root);

// The problems under `root`. A KernelBench root: the .py files of level<N>/ for each N in
// `levels` (default {1}), levels in the given order, files in numeric-prefix order. A plain
// directory: its .py files (names starting with '_' or '.' are left out); `levels` must then be
// unset. Errors: `root` missing or not a directory, a requested level directory missing, an empty
// selection.
Result<std::vector<Problem>> discover_problems(const std::filesystem::path& root,
                                               const std::optional<std::vector<int>>& levels);

// "1,2,3" → {1, 2, 3}: positive integers, no duplicates.
Result<std::vector<int>> parse_levels(std::string_view spec);

struct Shard {
  int index = 0;  // 0 <= index < count
  int count = 1;
  std::string to_string() const;  // "i/N"
};
Result<Shard> parse_shard(std::string_view spec);

// Problem j of `problems` (in their sorted order) belongs to shard j % count.
std::vector<Problem> select_shard(const std::vector<Problem>& problems, const Shard& shard);

// The pre-generated candidates of `problem` under `candidates_root`: the directory
// `<root>/<id>` when it exists (needed when several levels share a stem), else `<root>/<stem>`;
// its files named `<number>.py`, in numeric order. not_found when neither directory exists;
// invalid_argument for a .py file whose name is not a number, or a directory with no .py file.
// A KernelBench run directory (files level_N_problem_M_sample_K_kernel.py) is read by
// kernelbench_candidate_files instead (kernelbench.h).
Result<std::vector<std::filesystem::path>> candidate_files(const std::filesystem::path& candidates_root,
                                                           const Problem& problem);

}  // namespace kernelllm::eval
