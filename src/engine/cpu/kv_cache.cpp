// Paged, refcounted, copy-on-write KV cache; see kv_cache.h.
#include "engine/cpu/kv_cache.h"

#include <cassert>
#include <cstring>

namespace kernelllm::cpu {

PagedKvCache::PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t page_tokens, int64_t max_sequences)
    : kv_dim_(kv_dim),
      page_tokens_(page_tokens),
      page_floats_(num_layers * 2 * page_tokens * kv_dim),
      table_(0, page_tokens, max_sequences, /*grow=*/true) {}

void PagedKvCache::extend(SeqId seq, int64_t n) {
  assert(contains(seq));
  std::vector<KvPages::Copy> copies;
  table_.extend(seq, n, copies);
  while (static_cast<int64_t>(pages_.size()) < table_.num_pages()) {
    pages_.push_back(std::make_unique<float[]>(static_cast<size_t>(page_floats_)));
  }
  // A shared, partially filled page written to: its copy (the source keeps its other owners).
  for (const KvPages::Copy& c : copies) {
    std::memcpy(pages_[static_cast<size_t>(c.dst)].get(), pages_[static_cast<size_t>(c.src)].get(),
                static_cast<size_t>(page_floats_) * sizeof(float));
  }
}

float* PagedKvCache::slot(SeqId seq, int64_t layer, int64_t pos, int kv) const {
  assert(pos < length(seq));
  float* page = pages_[static_cast<size_t>(page_of(seq, pos))].get();
  return page + ((layer * 2 + kv) * page_tokens_ + pos % page_tokens_) * kv_dim_;
}

int32_t PagedKvCache::page_of(SeqId seq, int64_t pos) const {
  return table_.pages(seq)[static_cast<size_t>(pos / page_tokens_)];
}

}  // namespace kernelllm::cpu
