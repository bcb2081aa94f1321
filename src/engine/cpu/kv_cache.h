// Paged KV cache for the CPU backend. A page holds K and V of `page_tokens` consecutive
// positions for every layer; a sequence is a list of pages plus a length. Pages are
// refcounted: fork() shares all of the parent's pages, and extend() copies a shared page
// before it is written (copy-on-write), so full pages of a shared prompt stay shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"

namespace kernelllm::cpu {

class PagedKvCache {
 public:
  // kv_dim = num_key_value_heads * head_dim floats per position, per layer, for K and for V.
  PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t page_tokens, int64_t max_sequences);

  Result<SeqId> create();
  Result<SeqId> fork(SeqId parent);
  void release(SeqId seq);  // unknown ids are ignored
  bool contains(SeqId seq) const;
  int64_t length(SeqId seq) const;  // -1 for unknown ids

  // Makes positions [length, length + n) writable (new pages; a shared page among them is
  // copied first) and sets length += n. `seq` must exist.
  void extend(SeqId seq, int64_t n);

  // K or V of one position, kv_dim floats. The position must be < length(seq).
  float* key(SeqId seq, int64_t layer, int64_t pos) { return slot(seq, layer, pos, 0); }
  float* value(SeqId seq, int64_t layer, int64_t pos) { return slot(seq, layer, pos, 1); }
  const float* key(SeqId seq, int64_t layer, int64_t pos) const { return slot(seq, layer, pos, 0); }
  const float* value(SeqId seq, int64_t layer, int64_t pos) const { return slot(seq, layer, pos, 1); }

  int64_t pages_in_use() const;
  int64_t page_tokens() const { return page_tokens_; }
  // The page index backing `pos` (for tests of sharing).
  int32_t page_of(SeqId seq, int64_t pos) const;

 private:
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t length = 0;
  };
  int32_t allocate_page();
  void unref(int32_t page);
  float* slot(SeqId seq, int64_t layer, int64_t pos, int kv) const;
  Result<SeqId> free_slot() const;

  int64_t num_layers_, kv_dim_, page_tokens_, max_sequences_;
  int64_t page_floats_;  // num_layers * 2 * page_tokens * kv_dim; layout [layer][k|v][token][kv_dim]
  std::vector<std::unique_ptr<float[]>> pages_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_pages_;
  std::vector<std::optional<Sequence>> seqs_;
};

}  // namespace kernelllm::cpu
