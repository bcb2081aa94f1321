// Paged KV bookkeeping; see kv_pages.h.
#include "engine/kv_pages.h"

#include <string>

namespace kernelllm {

KvPages::KvPages(int64_t num_pages, int64_t page_tokens, int64_t max_sequences, bool grow)
    : num_pages_(num_pages), page_tokens_(page_tokens), max_sequences_(max_sequences), grow_(grow),
      refcount_(static_cast<size_t>(num_pages), 0) {
  free_.reserve(static_cast<size_t>(num_pages));
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

Result<SeqId> KvPages::free_slot() {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i]) return static_cast<SeqId>(i);
  }
  if (static_cast<int64_t>(seqs_.size()) >= max_sequences_) {
    return error(ErrorCode::resource_exhausted,
                 "KV cache: at most " + std::to_string(max_sequences_) + " sequences, all in use");
  }
  seqs_.emplace_back();
  return static_cast<SeqId>(seqs_.size() - 1);
}

Result<SeqId> KvPages::create() {
  KLLM_ASSIGN_OR_RETURN(SeqId id, free_slot());
  seqs_[static_cast<size_t>(id)] = Sequence{};
  return id;
}

Result<SeqId> KvPages::fork(SeqId parent) {
  if (!contains(parent)) {
    return error(ErrorCode::not_found, "KV cache: fork of unknown sequence " + std::to_string(parent));
  }
  KLLM_ASSIGN_OR_RETURN(SeqId id, free_slot());
  Sequence copy = *seqs_[static_cast<size_t>(parent)];
  for (int32_t p : copy.pages) ++refcount_[static_cast<size_t>(p)];
  seqs_[static_cast<size_t>(id)] = std::move(copy);
  return id;
}

void KvPages::release(SeqId seq) {
  if (!contains(seq)) return;
  for (int32_t p : seqs_[static_cast<size_t>(seq)]->pages) unref(p);
  seqs_[static_cast<size_t>(seq)].reset();
}

bool KvPages::contains(SeqId seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].has_value();
}

int64_t KvPages::length(SeqId seq) const { return contains(seq) ? seqs_[static_cast<size_t>(seq)]->length : -1; }

int64_t KvPages::pages_needed(SeqId seq, int64_t n) const {
  const Sequence& s = *seqs_[static_cast<size_t>(seq)];
  const int64_t target = (s.length + n + page_tokens_ - 1) / page_tokens_;
  int64_t needed = target - static_cast<int64_t>(s.pages.size());
  if (n > 0 && s.length % page_tokens_ != 0 && refcount_[static_cast<size_t>(s.pages.back())] > 1) ++needed;
  return needed;
}

int32_t KvPages::take() {
  if (free_.empty() && grow_) {
    refcount_.push_back(1);
    return static_cast<int32_t>(num_pages_++);
  }
  const int32_t p = free_.back();
  free_.pop_back();
  refcount_[static_cast<size_t>(p)] = 1;
  return p;
}

void KvPages::unref(int32_t page) {
  if (--refcount_[static_cast<size_t>(page)] == 0) free_.push_back(page);
}

int64_t KvPages::extend(SeqId seq, int64_t n, std::vector<Copy>& copies) {
  Sequence& s = *seqs_[static_cast<size_t>(seq)];
  int64_t first_changed = static_cast<int64_t>(s.pages.size());
  if (n > 0 && s.length % page_tokens_ != 0) {
    const auto last = static_cast<size_t>(s.length / page_tokens_);
    int32_t& page = s.pages[last];
    if (refcount_[static_cast<size_t>(page)] > 1) {
      const int32_t fresh = take();
      copies.push_back({page, fresh});
      unref(page);
      page = fresh;
      first_changed = static_cast<int64_t>(last);
    }
  }
  const int64_t target = (s.length + n + page_tokens_ - 1) / page_tokens_;
  while (static_cast<int64_t>(s.pages.size()) < target) s.pages.push_back(take());
  s.length += n;
  return first_changed;
}

void KvPages::truncate(SeqId seq, int64_t length) {
  Sequence& s = *seqs_[static_cast<size_t>(seq)];
  if (length < 0 || length >= s.length) return;
  const auto keep = static_cast<size_t>((length + page_tokens_ - 1) / page_tokens_);
  while (s.pages.size() > keep) {
    unref(s.pages.back());
    s.pages.pop_back();
  }
  s.length = length;
}

}  // namespace kernelllm
