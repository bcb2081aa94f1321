// Byte-level BPE on one pre-token, as tokenizers' models/bpe (word.rs merge_all): start from one
// symbol per byte, repeatedly apply the lowest-rank merge (leftmost on ties) until none applies.
// With ignore_merges a pre-token that is itself a vocab entry is emitted whole.
#include <algorithm>
#include <queue>

#include "engine/tokenizer_internal.h"

namespace kernelllm::tok {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<int32_t, int32_t>>& merge_pairs,
         const std::vector<int32_t>& merged_ids, bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  merges_.reserve(merge_pairs.size());
  for (size_t r = 0; r < merge_pairs.size(); ++r) {
    // tokenizers collects the merge list into a map in order, so a repeated pair keeps the
    // rank of its last occurrence; assignment here does the same.
    merges_[pair_key(merge_pairs[r].first, merge_pairs[r].second)] = {static_cast<int32_t>(r), merged_ids[r]};
  }
  const ByteLevel& bl = byte_level();
  for (size_t b = 0; b < 256; ++b) {
    const auto it = vocab_.find(bl.byte_to_utf8[b]);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void Bpe::encode_piece(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  const bool cacheable = raw.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(raw);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bool whole = false;
  if (ignore_merges_) {
    const auto it = vocab_.find(byte_level().encode(raw));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) merge(raw, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(raw), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Bpe::merge(std::string_view raw, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over the bytes; a min-heap holds candidate merges as
  // (rank, position, left id, right id). A popped candidate is stale when either symbol
  // changed since it was pushed (a merged symbol always gets a new, longer token's id).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(raw.size());
  for (char c : raw) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    // tokenizers drops bytes with no token when there is no unk token (none for byte-level).
    if (id < 0) continue;
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left;
    int32_t right;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int32_t pos) {
    const int32_t nxt = sym[static_cast<size_t>(pos)].next;
    if (nxt < 0) return;
    const int32_t a = sym[static_cast<size_t>(pos)].id, b = sym[static_cast<size_t>(nxt)].id;
    const auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) heap.push({it->second.first, pos, a, b, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[static_cast<size_t>(c.pos)];
    if (!left.alive || left.id != c.left || left.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(left.next)];
    if (right.id != c.right) continue;
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace kernelllm::tok
