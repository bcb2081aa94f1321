// sample_block.h's draw_token run on the host by std::threads: a group of `blocks` blocks of
// `threads` threads each, the same code the CUDA kernel runs per block or per cluster. Every
// block has its own Shared; a std::barrier per block stands for __syncthreads and one for the
// group for the cluster's barrier; std::atomic_ref gives the shared-memory atomics. For tests
// (unit/sample_block_test.cpp, cuda/sample_test.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "engine/sample_block.h"

namespace kernelllm::testing {

class HostGroupThread {
 public:
  HostGroupThread(int tid, int threads, int rank, std::span<sample_block::Shared> shared, std::barrier<>& block,
                  std::barrier<>& group)
      : tid_(tid), threads_(threads), rank_(rank), shared_(shared), block_(block), group_(group) {}
  int tid() const { return tid_; }
  int threads() const { return threads_; }
  int64_t first() const { return static_cast<int64_t>(rank_) * threads_ + tid_; }
  int64_t stride() const { return static_cast<int64_t>(threads_) * static_cast<int64_t>(shared_.size()); }
  int64_t trips(int64_t n) const { return n > first() ? (n - first() + stride() - 1) / stride() : 0; }
  void sync() { block_.arrive_and_wait(); }
  void hist_add(uint64_t (*hist)[sample_block::kBuckets], uint32_t bucket, uint64_t v) {
    if (v != 0) {
      std::atomic_ref<uint64_t>(hist[(tid_ / 32) % sample_block::kCopies][bucket]).fetch_add(v, std::memory_order_relaxed);
    }
  }
  void min(uint32_t* p, uint32_t v) {
    std::atomic_ref<uint32_t> a(*p);
    uint32_t cur = a.load(std::memory_order_relaxed);
    while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  void coarse_add(sample_block::Coarse& c, uint32_t bucket, uint64_t v) {
    const auto lo = static_cast<uint32_t>(v);
    const uint32_t old = std::atomic_ref<uint32_t>(c.lo[bucket]).fetch_add(lo, std::memory_order_relaxed);
    if (static_cast<uint32_t>(old + lo) < old) std::atomic_ref<uint32_t>(c.carry[bucket]).fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(c.hi[bucket]).fetch_add(static_cast<uint32_t>(v >> 32), std::memory_order_relaxed);
  }
  void append(sample_block::Shared& sh, bool take, bool low, uint64_t item) {
    if (!take) return;
    const uint32_t at = std::atomic_ref<uint32_t>(sh.n_own).fetch_add(1, std::memory_order_relaxed);
    if (low) std::atomic_ref<uint32_t>(sh.n_own_low).fetch_add(1, std::memory_order_relaxed);
    if (at < static_cast<uint32_t>(sample_block::kListCap)) sh.own[at] = item;
  }
  // a[0, nb) (a field of this block's Shared) summed over the group's blocks in every block:
  // each reads every block's copy between two group barriers, then writes its own.
  void group_sum(uint64_t* a, int nb) {
    if (shared_.size() == 1) return;
    const auto offset = reinterpret_cast<const char*>(a) - reinterpret_cast<const char*>(&shared_[static_cast<size_t>(rank_)]);
    group_.arrive_and_wait();
    std::vector<uint64_t> sums;
    for (int b = tid_; b < nb; b += threads_) {
      uint64_t s = 0;
      for (const sample_block::Shared& other : shared_) {
        s += reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(&other) + offset)[b];
      }
      sums.push_back(s);
    }
    group_.arrive_and_wait();
    size_t j = 0;
    for (int b = tid_; b < nb; b += threads_) a[b] = sums[j++];
    sync();
  }
  void combine_hist(sample_block::Shared& sh, int nb) { group_sum(sh.hist[0], nb); }
  void combine_coarse(sample_block::Shared& sh) { group_sum(sh.coarse.weight, sample_block::kCoarse); }
  // Every block's own list, in block order, into this block's list (where they all fit).
  void merge_lists(sample_block::Shared& sh) {
    group_.arrive_and_wait();
    uint32_t total = 0, low = 0;
    for (const sample_block::Shared& other : shared_) {
      total += other.n_own;
      low += other.n_own_low;
    }
    if (total <= static_cast<uint32_t>(sample_block::kListCap)) {
      uint32_t off = 0;
      for (const sample_block::Shared& other : shared_) {
        for (uint32_t i = static_cast<uint32_t>(tid_); i < other.n_own; i += static_cast<uint32_t>(threads_)) {
          sh.list[off + i] = other.own[i];
        }
        off += other.n_own;
      }
    }
    if (tid_ == 0) {
      sh.n_list = total;
      sh.n_list_low = low;
    }
    group_.arrive_and_wait();
    sync();
  }
  void combine_min(uint32_t* p) {
    if (shared_.size() == 1) return;
    const auto offset = reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(&shared_[static_cast<size_t>(rank_)]);
    group_.arrive_and_wait();
    uint32_t m = *p;
    for (const sample_block::Shared& other : shared_) {
      m = std::min(m, *reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(&other) + offset));
    }
    group_.arrive_and_wait();
    if (tid_ == 0) *p = m;
    sync();
  }

 private:
  int tid_, threads_, rank_;
  std::span<sample_block::Shared> shared_;
  std::barrier<>& block_;
  std::barrier<>& group_;
};

// The token of each draw (rows of `vocab` logits) by a group of `blocks` blocks of `threads`
// threads, every thread's answer checked to agree.
inline std::vector<int32_t> host_draw_tokens(std::span<const float> logits, int64_t vocab,
                                             std::span<const sample_block::Draw> draws, int threads, int blocks = 1) {
  std::vector<sample_block::Shared> shared(static_cast<size_t>(blocks));
  std::vector<std::unique_ptr<std::barrier<>>> block_barriers;
  for (int b = 0; b < blocks; ++b) block_barriers.push_back(std::make_unique<std::barrier<>>(threads));
  std::barrier<> group(static_cast<std::ptrdiff_t>(threads) * blocks);
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(threads * blocks));
  {
    std::vector<std::jthread> pool;
    for (int b = 0; b < blocks; ++b) {
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, b, t] {
          HostGroupThread ctx(t, threads, b, shared, *block_barriers[static_cast<size_t>(b)], group);
          for (const sample_block::Draw& d : draws) {
            got[static_cast<size_t>(b * threads + t)].push_back(sample_block::draw_token(
                ctx, shared[static_cast<size_t>(b)], logits.data() + d.row * vocab, vocab, d));
          }
        });
      }
    }
  }
  for (const auto& g : got) {
    if (g != got[0]) return {};  // threads disagreeing: an empty answer fails the caller's check
  }
  return got[0];
}

}  // namespace kernelllm::testing
