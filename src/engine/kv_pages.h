// The page table of a paged KV cache, for every backend: each sequence a list of page indices
// plus a length, pages refcounted so forks share them; the first write into a shared, partially
// filled page asks for a copy (copy-on-write). A fixed pool (the CUDA backend's device pages) or
// one that grows a page at a time (the CPU backend's host pages). The memory belongs to the
// backend; this class only decides page numbers (plain host code, unit-tested without a GPU).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"

namespace kernelllm {

class KvPages {
 public:
  // grow: when no page is free, take a new one (num_pages() grows) instead of a fixed pool of
  // num_pages; the caller adds its memory.
  KvPages(int64_t num_pages, int64_t page_tokens, int64_t max_sequences, bool grow = false);

  Result<SeqId> create();
  Result<SeqId> fork(SeqId parent);
  void release(SeqId seq);  // unknown ids are ignored
  bool contains(SeqId seq) const;
  int64_t length(SeqId seq) const;  // -1 for unknown ids

  // Pages that extend(seq, n) would take from the free list (new pages and a copy-on-write).
  int64_t pages_needed(SeqId seq, int64_t n) const;
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_pages() const { return num_pages_; }
  int64_t page_tokens() const { return page_tokens_; }

  struct Copy {
    int32_t src, dst;
  };
  // Makes positions [length, length + n) writable and sets length += n; the caller must have
  // checked pages_needed against free_pages (a fixed pool). Appends the page copies to do to `copies` and
  // returns the first logical page index whose physical page changed.
  // A fixed pool must have the pages (pages_needed <= free_pages).
  int64_t extend(SeqId seq, int64_t n, std::vector<Copy>& copies);
  // Takes back extend(): length becomes `length` and the pages past it are released (a length
  // outside [0, length(seq)) changes nothing). A page that extend() copied stays the sequence's
  // own copy; its rows before `length` are those of the page it copied.
  void truncate(SeqId seq, int64_t length);
  const std::vector<int32_t>& pages(SeqId seq) const { return seqs_[static_cast<size_t>(seq)]->pages; }
  int32_t refcount(int32_t page) const { return refcount_[static_cast<size_t>(page)]; }

 private:
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t length = 0;
  };
  Result<SeqId> free_slot();
  int32_t take();
  void unref(int32_t page);

  int64_t num_pages_, page_tokens_, max_sequences_;
  bool grow_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;
  std::vector<std::optional<Sequence>> seqs_;
};

}  // namespace kernelllm
