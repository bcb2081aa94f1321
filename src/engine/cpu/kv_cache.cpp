// Paged, refcounted, copy-on-write KV cache; see kv_cache.h.
#include "engine/cpu/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

namespace kernelllm::cpu {

PagedKvCache::PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t page_tokens, int64_t max_sequences)
    : num_layers_(num_layers),
      kv_dim_(kv_dim),
      page_tokens_(page_tokens),
      max_sequences_(max_sequences),
      page_floats_(num_layers * 2 * page_tokens * kv_dim) {}

Result<SeqId> PagedKvCache::free_slot() const {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i]) return static_cast<SeqId>(i);
  }
  if (static_cast<int64_t>(seqs_.size()) >= max_sequences_) {
    return error(ErrorCode::resource_exhausted,
                 "KV cache: at most " + std::to_string(max_sequences_) + " sequences, all in use");
  }
  return static_cast<SeqId>(seqs_.size());
}

Result<SeqId> PagedKvCache::create() {
  KLLM_ASSIGN_OR_RETURN(SeqId id, free_slot());
  if (static_cast<size_t>(id) == seqs_.size()) seqs_.emplace_back();
  seqs_[static_cast<size_t>(id)] = Sequence{};
  return id;
}

Result<SeqId> PagedKvCache::fork(SeqId parent) {
  if (!contains(parent)) {
    return error(ErrorCode::not_found, "KV cache: fork of unknown sequence " + std::to_string(parent));
  }
  KLLM_ASSIGN_OR_RETURN(SeqId id, free_slot());
  if (static_cast<size_t>(id) == seqs_.size()) seqs_.emplace_back();
  Sequence copy = *seqs_[static_cast<size_t>(parent)];
  for (int32_t p : copy.pages) ++refcount_[static_cast<size_t>(p)];
  seqs_[static_cast<size_t>(id)] = std::move(copy);
  return id;
}

void PagedKvCache::release(SeqId seq) {
  if (!contains(seq)) return;
  for (int32_t p : seqs_[static_cast<size_t>(seq)]->pages) unref(p);
  seqs_[static_cast<size_t>(seq)].reset();
}

bool PagedKvCache::contains(SeqId seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].has_value();
}

int64_t PagedKvCache::length(SeqId seq) const {
  return contains(seq) ? seqs_[static_cast<size_t>(seq)]->length : -1;
}

int32_t PagedKvCache::allocate_page() {
  if (!free_pages_.empty()) {
    const int32_t p = free_pages_.back();
    free_pages_.pop_back();
    refcount_[static_cast<size_t>(p)] = 1;
    return p;
  }
  pages_.push_back(std::make_unique<float[]>(static_cast<size_t>(page_floats_)));
  refcount_.push_back(1);
  return static_cast<int32_t>(pages_.size() - 1);
}

void PagedKvCache::unref(int32_t page) {
  if (--refcount_[static_cast<size_t>(page)] == 0) free_pages_.push_back(page);
}

void PagedKvCache::extend(SeqId seq, int64_t n) {
  assert(contains(seq));
  Sequence& s = *seqs_[static_cast<size_t>(seq)];
  const int64_t new_length = s.length + n;
  // The first page written to may be a shared, partially filled one: copy it.
  if (n > 0 && s.length % page_tokens_ != 0) {
    int32_t& page = s.pages[static_cast<size_t>(s.length / page_tokens_)];
    if (refcount_[static_cast<size_t>(page)] > 1) {
      const int32_t fresh = allocate_page();
      std::memcpy(pages_[static_cast<size_t>(fresh)].get(), pages_[static_cast<size_t>(page)].get(),
                  static_cast<size_t>(page_floats_) * sizeof(float));
      unref(page);
      page = fresh;
    }
  }
  const auto pages_needed = static_cast<size_t>((new_length + page_tokens_ - 1) / page_tokens_);
  while (s.pages.size() < pages_needed) s.pages.push_back(allocate_page());
  s.length = new_length;
}

float* PagedKvCache::slot(SeqId seq, int64_t layer, int64_t pos, int kv) const {
  const Sequence& s = *seqs_[static_cast<size_t>(seq)];
  assert(pos < s.length);
  float* page = pages_[static_cast<size_t>(s.pages[static_cast<size_t>(pos / page_tokens_)])].get();
  return page + ((layer * 2 + kv) * page_tokens_ + pos % page_tokens_) * kv_dim_;
}

int64_t PagedKvCache::pages_in_use() const {
  return static_cast<int64_t>(pages_.size() - free_pages_.size());
}

int32_t PagedKvCache::page_of(SeqId seq, int64_t pos) const {
  return seqs_[static_cast<size_t>(seq)]->pages[static_cast<size_t>(pos / page_tokens_)];
}

}  // namespace kernelllm::cpu
