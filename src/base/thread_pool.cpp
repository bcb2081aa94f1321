// ThreadPool: workers sleep on a condition variable and wake once per parallel_for
// (a generation counter tells a new job from a spurious wake-up).
#include "kernelllm/base/thread_pool.h"

#include <algorithm>

namespace kernelllm {

namespace {
// Chunk c of `chunks` equal parts of [0, n).
std::pair<int64_t, int64_t> chunk_range(int64_t n, int chunks, int c) {
  return {n * c / chunks, n * (c + 1) / chunks};
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  int total = num_threads > 0 ? num_threads : static_cast<int>(std::thread::hardware_concurrency());
  total = std::max(total, 1);
  workers_.reserve(static_cast<size_t>(total - 1));
  for (int i = 1; i < total; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job = nullptr;
    int64_t n = 0;
    int chunks = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      auto [b, e] = chunk_range(n, chunks, index);
      (*job)(b, e);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  const int chunks = static_cast<int>(std::min<int64_t>(size(), max_chunks));
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  auto [b, e] = chunk_range(n, chunks, 0);
  fn(b, e);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace kernelllm
