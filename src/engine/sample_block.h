// A token drawn from one row of logits by a group of thread blocks working together (a block,
// or a cluster of blocks that each take a share of the row and add up their histograms):
// written once for the CUDA backend's sampling kernel (engine/cuda/sample.cu, one block or one
// cluster per draw) and for the host, where tests run this same code on std::threads.
//
// What is drawn is sampler.h's sample_token: HF's warpers in HF's order (temperature; top-k
// keeps every token scoring >= the k-th largest; top-p keeps the shortest prefix of the
// descending order whose mass reaches top_p, at least one token), then inverse-CDF over that
// order with u = philox_u24(seed, index, step) / 2^24; greedy (temperature 0) is sampler.h's
// argmax. The arithmetic differs so that the token depends neither on the number of threads
// nor on their timing, and is the same on host and device:
//  - a weight is fixed point, floor(e^((logit - max) / T) * 2^40), from a float exp whose every
//    operation is rounded on its own (host_device.h; relative error ~1e-6, plus the rounding of
//    (logit - max) / T); sums of weights are exact integer sums. A token weighing less than
//    2^-40 of the largest (e^-27.7) is never drawn.
//  - the order is the logits' (descending, lower id first among equal logits); sampler.h
//    orders by logit / T, which can make two close logits equal.
//  - the k-th largest is found by radix selection on a 32-bit order key, 8 bits a pass over the
//    row, with a histogram of counts. The top-p cut and the drawn token come from one pass that
//    adds every weight into coarse buckets of (logit - max) / T (the buckets follow the order,
//    so the cut and the draw each fall in a known bucket), then one pass that gathers the items
//    of those buckets (a few hundred on a 128K row) into shared memory, where they are sorted
//    and their weights summed exactly. Where a bucket holds more items than the list takes
//    (rows with many equal logits), radix selection over the row finds the same tokens.
// So a draw equals sample_token's except where u, or top_p, falls within a few 1e-6 of a step
// of the cumulative distribution. Rows with non-finite logits: NaN logits are never drawn
// (last in the order, weight 0) and a row of NaNs draws 0; when the largest logit is infinite,
// the draw is uniform over the tokens holding it. sample_token leaves those rows undefined.
#pragma once

#include "engine/host_device.h"
#include "engine/philox.h"

namespace kernelllm::sample_block {

constexpr int kMaxThreads = 512;
constexpr int kDigitBits = 8;
constexpr int kBuckets = 1 << kDigitBits;
// Copies of the histogram a pass fills (a warp adds to copy warp % kCopies, so warps do not
// wait on each other's atomics), folded into copy 0 before the buckets are read.
constexpr int kCopies = 16;
constexpr int kWeightBits = 40;  // a weight of 1 (the largest logit's) is 2^40
// Weights are < 2^41, so the sum over a row stays below 2^62.
constexpr int64_t kMaxVocab = int64_t{1} << 21;
constexpr uint32_t kNanKey = 0xFFFFFFFFu;
// A thread's items in a pass over the row: chunks of kChunk consecutive logits (one 16-byte
// load where the row allows), kUnroll chunks loaded before any is used.
constexpr int kChunk = 4;
constexpr int kUnroll = 4;
// The coarse buckets of the weighted pass, and the most items (of the whole group) the draw
// gathers and sorts in shared memory; a power of two.
constexpr int kCoarse = 2048;
constexpr int kListCap = 4096;
// The coarse buckets split (max - the smallest logit) / T, at most this (weights below e^-28 are 0).
constexpr float kWeightRange = 28.0f;
// Draw::flags: the radix selection over the row also where the coarse buckets serve (tests,
// measurements).
constexpr uint32_t kForceRadix = 1;

// One token to draw; the kernel's argument, one per thread block.
struct Draw {
  int64_t row = 0;  // the logits row
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  uint64_t index = 0;  // sample index and step: the RNG counter
  uint64_t step = 0;
  uint32_t flags = 0;  // kForceRadix
};

// The weighted pass's buckets (see draw_token): per bucket the sum of the weights, added as
// 32-bit parts (shared-memory atomics of 32 bits are native, of 64 bits compare-and-swap
// loops): the low words, the carries out of them and the high words; then the sum as one
// number, and the sum of the buckets before it.
struct Coarse {
  uint32_t lo[kCoarse], carry[kCoarse], hi[kCoarse];
  uint64_t weight[kCoarse];
  uint64_t below[kCoarse];
};

// The block's shared memory.
struct Shared {
  union {  // the radix selection's histograms, or the coarse buckets (never both at once)
    uint64_t hist[kCopies][kBuckets];
    Coarse coarse;
  };
  uint64_t scan[2][kMaxThreads];
  // Gathered items, (key << 32) | id: this block's, then the group's (in rank order, then sorted).
  uint64_t own[kListCap];
  uint64_t list[kListCap];
  uint32_t n_own, n_own_low, n_list, n_list_low;  // items offered (past kListCap: not kept), of the lower range
  uint64_t pick_below;  // find_bucket's result: the sum of the buckets before pick
  uint32_t pick;
  uint32_t min_key;
  uint32_t min_id;
  uint32_t max_key_inv;  // ~(the largest key other than kNanKey), by min()
};

// The order key: ascending key = descending logit, -0 as +0, NaN last.
KLLM_HD uint32_t key_of(float logit) {
  uint32_t b = hd::bits_of(logit);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kNanKey;
  if ((b & 0x7FFFFFFFu) == 0) b = 0;
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return ~ascending;
}

// The logit of a key other than kNanKey (+0 for a zero).
KLLM_HD float logit_of(uint32_t key) {
  const uint32_t ascending = ~key;
  return hd::float_of((ascending & 0x80000000u) != 0 ? (ascending & 0x7FFFFFFFu) : ~ascending);
}

// floor(e^((logit - max_logit) / temperature) * 2^40) for logit <= max_logit, temperature > 0;
// exactly 2^40 for logit == max_logit (an infinite max included), 0 below e^-28 or for NaN.
// e^d = 2^k e^r, |r| <= ln 2 / 2, e^r by its Taylor series to r^6 (truncation < 2e-7, float
// rounding ~1e-6). `d` gets (logit - max_logit) / temperature as rounded here (0 for the max).
KLLM_HD float d_of(float logit, float max_logit, float temperature) {
  return logit == max_logit ? 0.0f : hd::div_rn(hd::sub_rn(logit, max_logit), temperature);
}
KLLM_HD bool weight_is_zero(float logit, float max_logit, float d) { return logit != max_logit && !(d > -28.0f); }
KLLM_HD uint64_t weight_and_d(float logit, float max_logit, float temperature, float& d) {
  d = d_of(logit, max_logit, temperature);
  if (logit == max_logit) return uint64_t{1} << kWeightBits;
  if (weight_is_zero(logit, max_logit, d)) return 0;
  const float k = hd::round_even(hd::mul_rn(d, 1.44269504f));        // in [-40, 0]
  float r = hd::fma_rn(-k, 0.693145752f, d);                            // ln 2 in two parts
  r = hd::fma_rn(-k, 1.42860677e-6f, r);
  float p = 1.0f / 720;
  p = hd::fma_rn(p, r, 1.0f / 120);
  p = hd::fma_rn(p, r, 1.0f / 24);
  p = hd::fma_rn(p, r, 1.0f / 6);
  p = hd::fma_rn(p, r, 0.5f);
  p = hd::fma_rn(p, r, 1.0f);
  p = hd::fma_rn(p, r, 1.0f);                                           // in [0.7, 1.42]
  const auto m = static_cast<uint64_t>(hd::mul_rn(p, 16777216.0f));     // exact: p * 2^24
  const int shift = kWeightBits - 24 + static_cast<int>(k);             // in [-24, 16]
  return shift >= 0 ? m << shift : m >> -shift;
}

KLLM_HD uint64_t weight_of(float logit, float max_logit, float temperature) {
  float d;
  return weight_and_d(logit, max_logit, temperature, d);
}

// ceil(top_p * total), at least 1, for top_p in (0, 1) and total < 2^62: the mass the top-p
// prefix must reach. Exact: top_p = mant * 2^-s with s >= 24.
KLLM_HD uint64_t top_p_target(float top_p, uint64_t total) {
  const uint32_t b = hd::bits_of(top_p);
  const int exponent = static_cast<int>((b >> 23) & 0xFFu);
  const uint64_t mant = (b & 0x7FFFFFu) | (exponent != 0 ? 0x800000u : 0u);
  const int s = exponent != 0 ? 150 - exponent : 149;
  const uint64_t lo_part = (total & 0xFFFFFFu) * mant;                 // < 2^48
  const uint64_t hi = (total >> 24) * mant + (lo_part >> 24);          // < 2^62
  const uint64_t lo = lo_part & 0xFFFFFFu;                             // total * mant = hi * 2^24 + lo
  const int sh = s - 24;
  uint64_t q = 0, rem = hi | lo;
  if (sh < 64) {
    q = hi >> sh;
    rem = (hi & ((uint64_t{1} << sh) - 1)) | lo;
  }
  q += rem != 0 ? 1 : 0;
  return q < 1 ? 1 : q;
}

// floor(u24 / 2^24 * mass) + 1: the drawn token is the first whose inclusive cumulative weight
// reaches it (exceeds u * mass), so it lies within a kept mass of `mass`.
KLLM_HD uint64_t draw_target(uint32_t u24, uint64_t mass) {
  return (mass >> 24) * u24 + (((mass & 0xFFFFFFu) * u24) >> 24) + 1;
}

// Inclusive sum of one value per thread over the block; `total` gets the block's sum.
template <class Ctx>
KLLM_HD uint64_t block_inclusive_scan(Ctx& ctx, Shared& sh, uint64_t v, uint64_t& total) {
  const int t = ctx.tid(), n = ctx.threads();
  int src = 0;
  sh.scan[0][t] = v;
  ctx.sync();
  for (int off = 1; off < n; off <<= 1) {
    uint64_t x = sh.scan[src][t];
    if (t >= off) x += sh.scan[src][t - off];
    sh.scan[src ^ 1][t] = x;
    src ^= 1;
    ctx.sync();
  }
  const uint64_t inclusive = sh.scan[src][t];
  total = sh.scan[src][n - 1];
  ctx.sync();  // before the buffers are written again
  return inclusive;
}

// Over sh.hist[0, nb): the first bucket where the inclusive running sum reaches `need`, into
// sh.pick, and the sum of the buckets before it into sh.pick_below. `need` is need_of(sum of
// the buckets), held to [1, that sum]; returned.
template <class Ctx, class Need>
KLLM_HD uint64_t find_bucket(Ctx& ctx, Shared& sh, int nb, const Need& need_of) {
  const int t = ctx.tid(), n = ctx.threads();
  const int per = (nb + n - 1) / n;
  const int b0 = t * per < nb ? t * per : nb;
  const int b1 = b0 + per < nb ? b0 + per : nb;
  uint64_t local = 0;
  for (int b = b0; b < b1; ++b) local += sh.hist[0][b];
  uint64_t total = 0;
  const uint64_t inclusive = block_inclusive_scan(ctx, sh, local, total);
  uint64_t need = need_of(total);
  if (need > total) need = total;
  if (need < 1) need = 1;
  uint64_t run = inclusive - local;
  if (run < need && need <= inclusive) {
    for (int b = b0; b < b1; ++b) {
      if (run + sh.hist[0][b] >= need) {
        sh.pick = static_cast<uint32_t>(b);
        sh.pick_below = run;
        break;
      }
      run += sh.hist[0][b];
    }
  }
  ctx.sync();
  return need;
}

struct Fixed {
  uint64_t need;
  KLLM_HD uint64_t operator()(uint64_t) const { return need; }
};

struct Selected {
  uint32_t key;    // the key where the running sum (in key order) reaches the need
  uint64_t below;  // the sum of the values of the keys before it
  uint64_t need;   // need_of(the sum over every eligible item), held to [1, that sum]
};

// How many of the tokens holding s.key, each of value v, the running sum takes to reach s.need.
KLLM_HD uint64_t ties_taken(const Selected& s, uint64_t v) { return (s.need - s.below + v - 1) / v; }

// Calls f(i, logit) for every item of this thread, kUnroll chunks a trip; items past n come as
// i >= n (logit 0), so that every thread of a warp makes the same calls. `aligned`: row is
// 16-byte aligned (the device then loads a chunk at once).
template <class Ctx, class F>
KLLM_HD void for_items(Ctx& ctx, const float* row, int64_t n, bool aligned, const F& f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk, stride = ctx.stride(), trips = ctx.trips(chunks);
  int64_t c = ctx.first();
  for (int64_t trip = 0; trip < trips; trip += kUnroll, c += kUnroll * stride) {
    float x[kUnroll][kChunk];
    KLLM_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i0 = (c + u * stride) * kChunk;
#if defined(__CUDA_ARCH__)
      if (aligned && i0 + kChunk <= n) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(row + i0));
        x[u][0] = v.x;
        x[u][1] = v.y;
        x[u][2] = v.z;
        x[u][3] = v.w;
        continue;
      }
#else
      (void)aligned;
#endif
      KLLM_UNROLL
      for (int e = 0; e < kChunk; ++e) x[u][e] = i0 + e < n ? row[i0 + e] : 0.0f;
    }
    KLLM_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      KLLM_UNROLL
      for (int e = 0; e < kChunk; ++e) f((c + u * stride) * kChunk + e, x[u][e]);
    }
  }
}

// Items i in [0, n) of row with item.key(i, row[i], key) true (eligible) and weight
// item.value(key), in ascending key order (key_bits bits): the key where the running sum of the
// values first reaches need_of(total). A pass over the items per kDigitBits of key; every block
// of the group counts its share of the items and ctx.combine_hist gives each block the group's
// histogram, so every block picks the same buckets.
template <class Ctx, class Item, class Need>
KLLM_HD Selected radix_select(Ctx& ctx, Shared& sh, const float* row, int64_t n, bool aligned, int key_bits,
                              const Item& item, const Need& need_of) {
  uint32_t prefix = 0;
  uint64_t below = 0, need = 0;
  for (int hi = key_bits; hi > 0;) {
    const int lo = hi > kDigitBits ? hi - kDigitBits : 0;
    const int nb = 1 << (hi - lo);
    for (int b = ctx.tid(); b < kCopies * nb; b += ctx.threads()) sh.hist[b / nb][b % nb] = 0;
    ctx.sync();
    for_items(ctx, row, n, aligned, [&](int64_t i, float logit) {
      uint32_t key = 0;
      uint64_t v = 0;
      if (i < n && item.key(i, logit, key) && (hi == 32 || (key >> hi) == prefix)) v = item.value(key);
      ctx.hist_add(sh.hist, (key >> lo) & static_cast<uint32_t>(nb - 1), v);
    });
    ctx.sync();
    for (int b = ctx.tid(); b < nb; b += ctx.threads()) {
      uint64_t sum = 0;
      for (int c = 0; c < kCopies; ++c) sum += sh.hist[c][b];
      sh.hist[0][b] = sum;
    }
    ctx.sync();
    ctx.combine_hist(sh, nb);
    if (hi == key_bits) {
      need = find_bucket(ctx, sh, nb, need_of);
    } else {
      find_bucket(ctx, sh, nb, Fixed{need - below});
    }
    prefix = (prefix << (hi - lo)) | sh.pick;
    below += sh.pick_below;
    hi = lo;
    ctx.sync();  // sh.pick is read before the next pass's find_bucket writes it
  }
  return Selected{prefix, below, need};
}

// Every token counts 1: for the k-th largest.
struct CountItem {
  KLLM_HD bool key(int64_t, float logit, uint32_t& key) const {
    key = key_of(logit);
    return true;
  }
  KLLM_HD uint64_t value(uint32_t) const { return 1; }
};

// Tokens with key <= limit (top-k's kept set), by weight.
struct WeightItem {
  uint32_t limit;
  float max_logit, temperature;
  KLLM_HD bool key(int64_t, float logit, uint32_t& key) const {
    key = key_of(logit);
    return key <= limit;
  }
  KLLM_HD uint64_t value(uint32_t key) const {
    return key == kNanKey ? 0 : weight_of(logit_of(key), max_logit, temperature);
  }
};

// The tokens holding one key, by id: for the j-th of equal logits.
struct TieItem {
  uint32_t tied;
  KLLM_HD bool key(int64_t i, float logit, uint32_t& key) const {
    key = static_cast<uint32_t>(i);
    return key_of(logit) == tied;
  }
  KLLM_HD uint64_t value(uint32_t) const { return 1; }
};

struct TopPNeed {
  float top_p;
  KLLM_HD uint64_t operator()(uint64_t total) const { return top_p_target(top_p, total); }
};

struct DrawNeed {
  uint32_t u24;
  uint64_t mass;  // the kept mass; 0: all of it (the total)
  KLLM_HD uint64_t operator()(uint64_t total) const { return draw_target(u24, mass != 0 ? mass : total); }
};

// The coarse bucket of a token of positive weight and d = (logit - max) / T (weight_and_d's):
// floor(-d * scale) held below kCoarse, 0 for the largest logit. It never decreases along the
// order (keys ascending), so every bucket's tokens are one run of the order, between its
// smallest and largest key.
KLLM_HD uint32_t coarse_bucket(float d, float scale) {
  const float x = hd::mul_rn(-d, scale);
  return x < static_cast<float>(kCoarse - 1) ? static_cast<uint32_t>(x) : static_cast<uint32_t>(kCoarse - 1);
}

// kCoarse over the span of d on the row (from the smallest non-NaN logit), at most kWeightRange.
KLLM_HD float coarse_scale(float min_logit, float max_logit, float temperature) {
  float span = -hd::div_rn(hd::sub_rn(min_logit, max_logit), temperature);
  if (!(span > 0.0f) || span > kWeightRange) span = kWeightRange;
  return hd::div_rn(static_cast<float>(kCoarse), span);
}

// The coarse bucket of a token with key <= w.limit, not NaN; kCoarse where its weight is 0.
KLLM_HD uint32_t coarse_bucket_of(float logit, const WeightItem& w, float scale) {
  const float d = d_of(logit, w.max_logit, w.temperature);
  return weight_is_zero(logit, w.max_logit, d) ? static_cast<uint32_t>(kCoarse) : coarse_bucket(d, scale);
}

// The weighted pass: every token of positive weight (key <= w.limit) into sh.coarse, the
// group's sums in every block, then c.below[b], the weight of the buckets before b. Returns the
// total weight.
template <class Ctx>
KLLM_HD uint64_t coarse_pass(Ctx& ctx, Shared& sh, const float* row, int64_t n, bool aligned, const WeightItem& w,
                             float scale) {
  Coarse& c = sh.coarse;
  for (int b = ctx.tid(); b < kCoarse; b += ctx.threads()) c.lo[b] = c.carry[b] = c.hi[b] = 0;
  ctx.sync();
  for_items(ctx, row, n, aligned, [&](int64_t i, float logit) {
    const uint32_t key = key_of(logit);
    if (i < n && key <= w.limit && key != kNanKey) {
      float d;
      const uint64_t v = weight_and_d(logit, w.max_logit, w.temperature, d);
      if (v != 0) ctx.coarse_add(c, coarse_bucket(d, scale), v);
    }
  });
  ctx.sync();
  // Sums < 2^62: the high words and carries (< 2^9 and 1 an item, at most 2^21 items) fit 32 bits.
  for (int b = ctx.tid(); b < kCoarse; b += ctx.threads()) {
    c.weight[b] = (uint64_t{c.hi[b] + c.carry[b]} << 32) + c.lo[b];
  }
  ctx.sync();
  ctx.combine_coarse(sh);
  const int t = ctx.tid(), nt = ctx.threads();
  const int per = (kCoarse + nt - 1) / nt;
  const int b0 = t * per < kCoarse ? t * per : kCoarse;
  const int b1 = b0 + per < kCoarse ? b0 + per : kCoarse;
  uint64_t local = 0;
  for (int b = b0; b < b1; ++b) local += c.weight[b];
  uint64_t total = 0;
  uint64_t run = block_inclusive_scan(ctx, sh, local, total) - local;
  for (int b = b0; b < b1; ++b) {
    c.below[b] = run;
    run += c.weight[b];
  }
  ctx.sync();
  return total;
}

// The first coarse bucket whose weight, with the buckets' before it, reaches t (1 <= t <= total).
KLLM_HD int coarse_find(const Coarse& c, uint64_t t) {
  int lo = 0, hi = kCoarse - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (c.below[mid] + c.weight[mid] >= t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Every token of coarse buckets [a0, a1] or [b0, b1] (a0 <= b0, a1 <= b1) into sh.list as
// (key << 32) | id, sorted (the order, ties by id) in every block of the group, so that where
// a1 < b0 the sh.n_list_low tokens of the first range come first. Returns their count, which is
// past kListCap (and the list not made) where they do not fit.
template <class Ctx>
KLLM_HD uint32_t gather_sorted(Ctx& ctx, Shared& sh, const float* row, int64_t n, bool aligned, const WeightItem& w,
                               float scale, uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) {
  if (ctx.tid() == 0) sh.n_own = sh.n_own_low = 0;
  ctx.sync();
  for_items(ctx, row, n, aligned, [&](int64_t i, float logit) {
    const uint32_t key = key_of(logit);
    uint32_t b = kCoarse;
    if (i < n && key <= w.limit && key != kNanKey) b = coarse_bucket_of(logit, w, scale);
    const bool low = b >= a0 && b <= a1;
    ctx.append(sh, low || (b >= b0 && b <= b1), low, (uint64_t{key} << 32) | static_cast<uint32_t>(i));
  });
  ctx.sync();
  ctx.merge_lists(sh);
  const uint32_t m = sh.n_list;
  if (m > static_cast<uint32_t>(kListCap)) return m;
  const auto t = static_cast<uint32_t>(ctx.tid()), nt = static_cast<uint32_t>(ctx.threads());
  uint32_t p = 1;
  while (p < m) p <<= 1;
  for (uint32_t i = m + t; i < p; i += nt) sh.list[i] = ~uint64_t{0};
  ctx.sync();
  // Bitonic sort of the p items.
  for (uint32_t k = 2; k <= p; k <<= 1) {
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      for (uint32_t i = t; i < p; i += nt) {
        const uint32_t l = i ^ j;
        if (l > i) {
          const uint64_t a = sh.list[i], b = sh.list[l];
          if ((i & k) == 0 ? a > b : a < b) {
            sh.list[i] = b;
            sh.list[l] = a;
          }
        }
      }
      ctx.sync();
    }
  }
  return m;
}

// In sh.list[begin, end) (sorted), the first item whose running weight, counted on from `base`,
// reaches t; its running weight (inclusive) into `reached`; `end` where none does. Every thread
// gets the same.
template <class Ctx>
KLLM_HD uint32_t first_reaching(Ctx& ctx, Shared& sh, uint32_t begin, uint32_t end, const WeightItem& w,
                                uint64_t base, uint64_t t, uint64_t& reached) {
  const auto tid = static_cast<uint32_t>(ctx.tid()), nt = static_cast<uint32_t>(ctx.threads());
  const uint32_t m = end - begin, per = (m + nt - 1) / nt;
  const uint32_t i0 = begin + (tid * per < m ? tid * per : m);
  const uint32_t i1 = i0 + per < end ? i0 + per : end;
  uint64_t local = 0;
  for (uint32_t i = i0; i < i1; ++i) local += w.value(static_cast<uint32_t>(sh.list[i] >> 32));
  if (tid == 0) sh.min_id = end;
  uint64_t total = 0;
  uint64_t run = base + block_inclusive_scan(ctx, sh, local, total) - local;  // its syncs order min_id's reset
  uint32_t mine = end;
  uint64_t mine_run = 0;
  for (uint32_t i = i0; i < i1; ++i) {
    run += w.value(static_cast<uint32_t>(sh.list[i] >> 32));
    if (run >= t) {
      mine = i;
      mine_run = run;
      break;
    }
  }
  ctx.min(&sh.min_id, mine);
  ctx.sync();
  const uint32_t found = sh.min_id;
  if (found < end && mine == found) sh.pick_below = mine_run;
  ctx.sync();
  reached = sh.pick_below;
  ctx.sync();  // before sh.pick_below or sh.min_id is written again
  return found;
}

// The drawn token (after top-k's limit, in w) from the coarse buckets: one weighted pass, then
// the top-p cut and the draw among the gathered tokens of the buckets they fall in. False where
// those buckets hold more than kListCap tokens (the caller then selects by radix over the row).
template <class Ctx>
KLLM_HD bool draw_from_buckets(Ctx& ctx, Shared& sh, const float* row, int64_t n, bool aligned, const WeightItem& w,
                               float min_logit, const Draw& d, uint32_t u24, int32_t& token) {
  const float scale = coarse_scale(min_logit, w.max_logit, w.temperature);
  const uint64_t total = coarse_pass(ctx, sh, row, n, aligned, w, scale);
  const Coarse& c = sh.coarse;
  constexpr auto kCap = static_cast<uint32_t>(kListCap);
  uint64_t mass = total, reached = 0;
  // The draw's buckets [dl, dh] where gathered with the cut's (their tokens: the list's first
  // draw_end), else none (dl > dh).
  int dl = 1, dh = 0;
  uint32_t draw_end = 0;
  if (d.top_p < 1.0f) {
    uint64_t need = top_p_target(d.top_p, total);
    if (need > total) need = total;
    // The cut lies in bucket bp; the mass it keeps is in [need, through bp], so the draw target
    // is in [draw_target(u, need), draw_target(u, through bp)]: buckets [dl, dh]. One gather for
    // both where they fit, else the cut's bucket alone first.
    const int bp = coarse_find(c, need);
    dl = coarse_find(c, draw_target(u24, need));
    dh = coarse_find(c, draw_target(u24, c.below[bp] + c.weight[bp]));
    if (dh + 1 >= bp) dh = bp;  // one run of buckets
    const auto ubp = static_cast<uint32_t>(bp);
    uint32_t m = gather_sorted(ctx, sh, row, n, aligned, w, scale, static_cast<uint32_t>(dl),
                               static_cast<uint32_t>(dh), ubp, ubp);
    if (m > kCap) {
      dl = 1;
      dh = 0;
      m = gather_sorted(ctx, sh, row, n, aligned, w, scale, ubp, ubp, ubp, ubp);
      if (m > kCap) return false;
    }
    // The cut's tokens: past the draw's where those are a range of their own, else all.
    const bool apart = dl <= dh && dh < bp;
    const uint32_t cut_begin = apart ? sh.n_list_low : 0;
    draw_end = apart ? cut_begin : m;
    // mass: through the last kept token. (The token is always found; the test keeps a miscount
    // from reading past the list.)
    const uint64_t base = c.below[dl <= dh ? dl : bp];
    if (first_reaching(ctx, sh, cut_begin, m, w, apart ? c.below[bp] : base, need, mass) >= m) return false;
  }
  const uint64_t t = draw_target(u24, mass);
  const int bd = coarse_find(c, t);
  uint32_t end = draw_end;
  if (!(dl <= bd && bd <= dh)) {  // never where the draw's buckets were gathered
    dl = bd;
    const auto ubd = static_cast<uint32_t>(bd);
    end = gather_sorted(ctx, sh, row, n, aligned, w, scale, ubd, ubd, ubd, ubd);
    if (end > kCap) return false;
  }
  const uint32_t i = first_reaching(ctx, sh, 0, end, w, c.below[dl], t, reached);
  if (i >= end) return false;  // never: the target lies in the gathered buckets
  token = static_cast<int32_t>(static_cast<uint32_t>(sh.list[i]));
  return true;
}

KLLM_HD int bit_width(uint64_t x) {
  int w = 0;
  while (x != 0) {
    ++w;
    x >>= 1;
  }
  return w;
}

// The token of draw `d` from row[0, n), 1 <= n <= kMaxVocab; every thread of the group calls
// it and gets the token. Ctx, for a group of blocks that each have their own `sh`:
//  - tid(), threads(): the thread in its block, and the block's size (1..kMaxThreads);
//  - first(), stride(), trips(chunks): the chunks of kChunk items a thread visits, first() +
//    j * stride() for j < trips(chunks) (for_items skips those past the row; on the device the
//    count is the same for a whole warp);
//  - sync(): the block's barrier; min(uint32_t*, v): an atomic min on the block's `sh`;
//  - hist_add(hist, bucket, v): hist[c][bucket] += v for one of the kCopies copies c, unless v
//    is 0 (every thread calls it as often, so a warp can add up its equal buckets first);
//  - combine_hist(sh, nb), combine_min(uint32_t* p) (called after a sync, return after one):
//    sh.hist[0][0, nb) and *p become the sum and the min over the group's blocks;
//  - coarse_add(c, bucket, v): adds v > 0 to bucket's sum in 32-bit parts: the low word to
//    c.lo, a carry out of it to c.carry, the high word to c.hi;
//    combine_coarse(sh) (as combine_hist): sh.coarse.weight summed over the group;
//  - append(sh, take, low, item): where take, item into sh.own[sh.n_own++] (kept only below
//    kListCap; counted past it), and sh.n_own_low counts those with low (every thread calls it
//    as often); merge_lists(sh) (called after a sync, returns after one): sh.n_list and
//    sh.n_list_low become the group's sums and, where n_list <= kListCap, sh.list[0, n_list)
//    the group's sh.own lists one after the other in block order.
template <class Ctx>
KLLM_HD int32_t draw_token(Ctx& ctx, Shared& sh, const float* row, int64_t n, const Draw& d) {
  ctx.sync();  // `sh` may still be read by a previous call
  if (ctx.tid() == 0) {
    sh.min_key = kNanKey;
    sh.min_id = 0xFFFFFFFFu;
    sh.max_key_inv = 0xFFFFFFFFu;
  }
  ctx.sync();
  const bool aligned = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  uint32_t local = kNanKey, local_inv = 0xFFFFFFFFu;
  for_items(ctx, row, n, aligned, [&](int64_t i, float logit) {
    const uint32_t k = i < n ? key_of(logit) : kNanKey;
    local = k < local ? k : local;
    if (k != kNanKey && ~k < local_inv) local_inv = ~k;
  });
  ctx.min(&sh.min_key, local);
  ctx.min(&sh.max_key_inv, local_inv);
  ctx.sync();
  ctx.combine_min(&sh.min_key);
  const uint32_t top = sh.min_key;
  if (top == kNanKey) return 0;  // only NaNs

  if (d.temperature == 0.0f) {  // argmax: a NaN at index 0 wins, else the first of the largest
    if (key_of(row[0]) == kNanKey) return 0;
    uint32_t found = 0xFFFFFFFFu;  // a thread's items come in increasing order
    for_items(ctx, row, n, aligned, [&](int64_t i, float logit) {
      if (i < n && found == 0xFFFFFFFFu && key_of(logit) == top) found = static_cast<uint32_t>(i);
    });
    ctx.min(&sh.min_id, found);
    ctx.sync();
    ctx.combine_min(&sh.min_id);
    return static_cast<int32_t>(sh.min_id);
  }

  uint32_t limit = kNanKey;
  if (d.top_k > 0 && d.top_k < n) {
    limit = radix_select(ctx, sh, row, n, aligned, 32, CountItem{}, Fixed{static_cast<uint64_t>(d.top_k)}).key;
  }
  const WeightItem weights{limit, logit_of(top), d.temperature};
  const uint32_t u24 = philox_u24(d.seed, d.index, d.step);
  if ((d.flags & kForceRadix) == 0) {
    ctx.combine_min(&sh.max_key_inv);  // the smallest non-NaN logit, for the buckets' scale
    int32_t token = 0;
    if (draw_from_buckets(ctx, sh, row, n, aligned, weights, logit_of(~sh.max_key_inv), d, u24, token)) return token;
    ctx.sync();  // every thread is done with sh.coarse before the radix selection's histograms take its place
  }
  uint64_t mass = 0;
  if (d.top_p < 1.0f) {
    const Selected cut = radix_select(ctx, sh, row, n, aligned, 32, weights, TopPNeed{d.top_p});
    const uint64_t v = weights.value(cut.key);
    mass = cut.below + ties_taken(cut, v) * v;  // through the last kept token
  }
  const Selected drawn =
      radix_select(ctx, sh, row, n, aligned, 32, weights, DrawNeed{u24, mass});
  // Among tokens of equal logit (equal weight v), the j-th by id.
  const uint64_t j = ties_taken(drawn, weights.value(drawn.key));
  const int id_bits = n > 1 ? bit_width(static_cast<uint64_t>(n - 1)) : 1;
  return static_cast<int32_t>(radix_select(ctx, sh, row, n, aligned, id_bits, TieItem{drawn.key}, Fixed{j}).key);
}

}  // namespace kernelllm::sample_block
