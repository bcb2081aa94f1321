// sample_block.h's draw_token run on the host by a block of std::threads: the same code the CUDA
// kernel runs per thread block, with a std::barrier for __syncthreads and std::atomic_ref for the
// shared-memory atomics. For tests (unit/sample_block_test.cpp, cuda/sample_test.cpp).
#pragma once

#include <atomic>
#include <barrier>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "engine/sample_block.h"

namespace kernelllm::testing {

class HostBlock {
 public:
  HostBlock(int tid, int threads, std::barrier<>& barrier) : tid_(tid), threads_(threads), barrier_(barrier) {}
  int tid() const { return tid_; }
  int threads() const { return threads_; }
  void sync() { barrier_.arrive_and_wait(); }
  void add(uint64_t* p, uint64_t v) { std::atomic_ref<uint64_t>(*p).fetch_add(v, std::memory_order_relaxed); }
  void min(uint32_t* p, uint32_t v) {
    std::atomic_ref<uint32_t> a(*p);
    uint32_t cur = a.load(std::memory_order_relaxed);
    while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }

 private:
  int tid_, threads_;
  std::barrier<>& barrier_;
};

// The token of each draw (rows of `vocab` logits), every thread's answer checked to agree.
inline std::vector<int32_t> host_draw_tokens(std::span<const float> logits, int64_t vocab,
                                             std::span<const sample_block::Draw> draws, int threads) {
  auto sh = std::make_unique<sample_block::Shared>();
  std::barrier<> barrier(threads);
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(threads));
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        HostBlock ctx(t, threads, barrier);
        for (const sample_block::Draw& d : draws) {
          got[static_cast<size_t>(t)].push_back(
              sample_block::draw_token(ctx, *sh, logits.data() + d.row * vocab, vocab, d));
        }
      });
    }
  }
  for (const auto& g : got) {
    if (g != got[0]) return {};  // threads disagreeing: an empty answer fails the caller's check
  }
  return got[0];
}

}  // namespace kernelllm::testing
