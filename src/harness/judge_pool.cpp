// JudgePool (judge_pool.h).
#include "judge_pool.h"

#include <fmt/format.h>

#include "kernelllm/harness/verify.h"

namespace kernelllm::harness {
namespace fs = std::filesystem;

JudgePool& JudgePool::shared() {
  static auto* pool = new JudgePool();
  return *pool;
}

namespace {

// Asks a judge that greeted to exit, then kills what is left.
void end_judge(Worker& judge) {
  if (judge.proc.running() && !judge.hello.is_null()) {  // (one still importing gets no request)
    judge.request(Json{{"op", "exit"}}, 5);
    judge.proc.wait(deadline_in(5));
  }
  judge.proc.kill_tree();
}

}  // namespace

std::unique_ptr<Worker> JudgePool::take(const std::string& key) {
  std::unique_ptr<Worker> found;
  std::deque<std::unique_ptr<Worker>> dead;
  {
    std::lock_guard lock(mu_);
    auto it = idle_.find(key);
    while (it != idle_.end() && !it->second.empty() && !found) {
      std::unique_ptr<Worker> w = std::move(it->second.front());
      it->second.pop_front();
      if (w->proc.running()) {
        found = std::move(w);
      } else {
        dead.push_back(std::move(w));
      }
    }
  }
  for (auto& w : dead) end(std::move(w));  // died while kept: reaped
  return found;
}

void JudgePool::put(const std::string& key, std::unique_ptr<Worker> judge) {
  judge->proc.set_cancel(nullptr);  // the call that used it is over
  {
    std::lock_guard lock(mu_);
    auto& q = idle_[key];
    if (q.size() < kMaxIdle) {
      q.push_back(std::move(judge));
      return;
    }
  }
  end(std::move(judge));
}

size_t JudgePool::clear() {
  std::map<std::string, std::deque<std::unique_ptr<Worker>>> all;
  {
    std::lock_guard lock(mu_);
    all.swap(idle_);
  }
  size_t n = 0;
  for (auto& [key, q] : all) {
    for (auto& w : q) end(std::move(w));
    n += q.size();
  }
  // The pool's directory goes too once no judge works in it (one still serving a call keeps it).
  std::lock_guard lock(mu_);
  std::error_code ec;
  if (!dir_.empty() && fs::is_empty(dir_, ec) && fs::remove(dir_, ec)) dir_.clear();
  return n;
}

Result<fs::path> JudgePool::work_dir(const std::string& tag) {
  std::lock_guard lock(mu_);
  if (dir_.empty() || !fs::is_directory(dir_)) {
    KLLM_ASSIGN_OR_RETURN(std::string made, make_run_dir("judges-"));
    dir_ = made;
  }
  return dir_ / fmt::format("judge-{}-{}", tag, made_++);
}

bool JudgePool::made(const fs::path& work_dir) const {
  std::lock_guard lock(mu_);
  return !dir_.empty() && work_dir.parent_path() == dir_;
}

void JudgePool::end(std::unique_ptr<Worker> judge) {
  if (!judge) return;
  end_judge(*judge);
  if (made(judge->work_dir)) {
    std::error_code ec;
    fs::remove_all(judge->work_dir, ec);
  }
}

}  // namespace kernelllm::harness
