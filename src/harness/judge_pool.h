// Internal to the harness: judge processes kept between verify calls of one process (an `eval`
// run's problems), so that a problem's judge costs a `release` and a `load_problem` instead of a
// fork, a CUDA context (which the driver makes one at a time for every process of the host) and
// the first use of every kernel. A judge is kept only when its `release` says the process is as
// it greeted (worker/judge_reuse.py): nothing of the last problem left, torch set up as before.
// Judges only: a process that ran candidate code is never reused.
#pragma once

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kernelllm/base/status.h"
#include "workers.h"

namespace kernelllm::harness {

class JudgePool {
 public:
  // The process's pool; never destroyed (its judges die with this process, as every forked one).
  static JudgePool& shared();
  // A judge kept under `key` (interpreter, package, device and kind: Verifier::judge_pool_key),
  // alive and greeted; null when none.
  std::unique_ptr<Worker> take(const std::string& key);
  // Keeps a released judge for a later call; beyond kMaxIdle of one key it is ended instead.
  void put(const std::string& key, std::unique_ptr<Worker> judge);
  // Ends every judge kept (each holds a CUDA context and its memory): `eval` once its problems
  // are done. Returns how many.
  size_t clear();
  // A work directory (HOME, TMPDIR and cwd) of its own for a judge that may be kept, named by
  // `tag`, in a directory of the pool's that outlives each verify call's run directory (named like
  // one, so that a later run removes it once this process is gone).
  Result<std::filesystem::path> work_dir(const std::string& tag);
  // Whether `work_dir` is one work_dir() made (only such a judge may be kept: another's goes
  // with its call's run directory).
  bool made(const std::filesystem::path& work_dir) const;
  // Ends a judge; its work directory goes too when it is one of the pool's.
  void end(std::unique_ptr<Worker> judge);
  static constexpr size_t kMaxIdle = 16;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::deque<std::unique_ptr<Worker>>> idle_;
  std::filesystem::path dir_;
  uint64_t made_ = 0;
};

}  // namespace kernelllm::harness
