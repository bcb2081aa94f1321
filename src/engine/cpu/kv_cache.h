// Paged KV cache for the CPU backend: the page table is KvPages (engine/kv_pages.h, shared with
// the CUDA backend: refcounted pages, forks share them, copy-on-write of a shared partial page),
// grown a page at a time; this class holds the pages' floats and does the copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv_pages.h"
#include "kernelllm/base/status.h"
#include "kernelllm/engine/backend.h"

namespace kernelllm::cpu {

class PagedKvCache {
 public:
  // kv_dim = num_key_value_heads * head_dim floats per position, per layer, for K and for V.
  PagedKvCache(int64_t num_layers, int64_t kv_dim, int64_t page_tokens, int64_t max_sequences);

  Result<SeqId> create() { return table_.create(); }
  Result<SeqId> fork(SeqId parent) { return table_.fork(parent); }
  void release(SeqId seq) { table_.release(seq); }  // unknown ids are ignored
  bool contains(SeqId seq) const { return table_.contains(seq); }
  int64_t length(SeqId seq) const { return table_.length(seq); }  // -1 for unknown ids

  // Makes positions [length, length + n) writable (new pages; a shared page among them is
  // copied first) and sets length += n. `seq` must exist.
  void extend(SeqId seq, int64_t n);

  // K or V of one position, kv_dim floats. The position must be < length(seq).
  float* key(SeqId seq, int64_t layer, int64_t pos) { return slot(seq, layer, pos, 0); }
  float* value(SeqId seq, int64_t layer, int64_t pos) { return slot(seq, layer, pos, 1); }
  const float* key(SeqId seq, int64_t layer, int64_t pos) const { return slot(seq, layer, pos, 0); }
  const float* value(SeqId seq, int64_t layer, int64_t pos) const { return slot(seq, layer, pos, 1); }

  int64_t pages_in_use() const { return table_.num_pages() - table_.free_pages(); }
  int64_t page_tokens() const { return table_.page_tokens(); }
  // The page index backing `pos` (for tests of sharing).
  int32_t page_of(SeqId seq, int64_t pos) const;

 private:
  float* slot(SeqId seq, int64_t layer, int64_t pos, int kv) const;

  int64_t kv_dim_, page_tokens_;
  int64_t page_floats_;  // num_layers * 2 * page_tokens * kv_dim; layout [layer][k|v][token][kv_dim]
  KvPages table_;
  std::vector<std::unique_ptr<float[]>> pages_;
};

}  // namespace kernelllm::cpu
