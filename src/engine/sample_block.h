// A token drawn from one row of logits by a block of threads working together: written once
// for the CUDA backend's sampling kernel (engine/cuda/sample.cu, one thread block per draw) and
// for the host, where tests run this same code on a block of std::threads.
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
//  - the k-th largest, the top-p cut and the drawn token are found by radix selection on a
//    32-bit order key, 11 bits a pass over the row, with a histogram of counts or weights,
//    rather than by sorting.
// So a draw equals sample_token's except where u, or top_p, falls within a few 1e-6 of a step
// of the cumulative distribution. Rows with non-finite logits: NaN logits are never drawn
// (last in the order, weight 0) and a row of NaNs draws 0; when the largest logit is infinite,
// the draw is uniform over the tokens holding it. sample_token leaves those rows undefined.
#pragma once

#include "engine/host_device.h"
#include "engine/philox.h"

namespace kernelllm::sample_block {

constexpr int kMaxThreads = 1024;
constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kWeightBits = 40;  // a weight of 1 (the largest logit's) is 2^40
// Weights are < 2^41, so the sum over a row stays below 2^62.
constexpr int64_t kMaxVocab = int64_t{1} << 21;
constexpr uint32_t kNanKey = 0xFFFFFFFFu;

// One token to draw; the kernel's argument, one per thread block.
struct Draw {
  int64_t row = 0;  // the logits row
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  uint64_t index = 0;  // sample index and step: the RNG counter
  uint64_t step = 0;
};

// The block's shared memory.
struct Shared {
  uint64_t hist[kBuckets];
  uint64_t scan[2][kMaxThreads];
  uint64_t pick_below;  // find_bucket's result: the sum of the buckets before pick
  uint32_t pick;
  uint32_t min_key;
  uint32_t min_id;
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
// rounding ~1e-6).
KLLM_HD uint64_t weight_of(float logit, float max_logit, float temperature) {
  if (logit == max_logit) return uint64_t{1} << kWeightBits;
  const float d = hd::div_rn(hd::sub_rn(logit, max_logit), temperature);
  if (!(d > -28.0f)) return 0;
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
  for (int b = b0; b < b1; ++b) local += sh.hist[b];
  uint64_t total = 0;
  const uint64_t inclusive = block_inclusive_scan(ctx, sh, local, total);
  uint64_t need = need_of(total);
  if (need > total) need = total;
  if (need < 1) need = 1;
  uint64_t run = inclusive - local;
  if (run < need && need <= inclusive) {
    for (int b = b0; b < b1; ++b) {
      if (run + sh.hist[b] >= need) {
        sh.pick = static_cast<uint32_t>(b);
        sh.pick_below = run;
        break;
      }
      run += sh.hist[b];
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

// Items i in [0, n) with item.key(i, key) true (eligible) and weight item.value(key), in
// ascending key order (key_bits bits): the key where the running sum of the values first
// reaches need_of(total). A pass over the items per kDigitBits of key.
template <class Ctx, class Item, class Need>
KLLM_HD Selected radix_select(Ctx& ctx, Shared& sh, int64_t n, int key_bits, const Item& item, const Need& need_of) {
  uint32_t prefix = 0;
  uint64_t below = 0, need = 0;
  for (int hi = key_bits; hi > 0;) {
    const int lo = hi > kDigitBits ? hi - kDigitBits : 0;
    const int nb = 1 << (hi - lo);
    for (int b = ctx.tid(); b < nb; b += ctx.threads()) sh.hist[b] = 0;
    ctx.sync();
    for (int64_t i = ctx.tid(); i < n; i += ctx.threads()) {
      uint32_t key = 0;
      if (!item.key(i, key)) continue;
      if (hi < 32 && (key >> hi) != prefix) continue;
      const uint64_t v = item.value(key);
      if (v != 0) ctx.add(&sh.hist[(key >> lo) & static_cast<uint32_t>(nb - 1)], v);
    }
    ctx.sync();
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
  const float* row;
  KLLM_HD bool key(int64_t i, uint32_t& key) const {
    key = key_of(row[i]);
    return true;
  }
  KLLM_HD uint64_t value(uint32_t) const { return 1; }
};

// Tokens with key <= limit (top-k's kept set), by weight.
struct WeightItem {
  const float* row;
  uint32_t limit;
  float max_logit, temperature;
  KLLM_HD bool key(int64_t i, uint32_t& key) const {
    key = key_of(row[i]);
    return key <= limit;
  }
  KLLM_HD uint64_t value(uint32_t key) const {
    return key == kNanKey ? 0 : weight_of(logit_of(key), max_logit, temperature);
  }
};

// The tokens holding one key, by id: for the j-th of equal logits.
struct TieItem {
  const float* row;
  uint32_t tied;
  KLLM_HD bool key(int64_t i, uint32_t& key) const {
    key = static_cast<uint32_t>(i);
    return key_of(row[i]) == tied;
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

KLLM_HD int bit_width(uint64_t x) {
  int w = 0;
  while (x != 0) {
    ++w;
    x >>= 1;
  }
  return w;
}

// The token of draw `d` from row[0, n), 1 <= n <= kMaxVocab; every thread of the block calls
// it and gets the token. Ctx: tid(), threads() (1..kMaxThreads), sync() (a block barrier),
// add(uint64_t*, v) and min(uint32_t*, v) (atomic, on `sh`).
template <class Ctx>
KLLM_HD int32_t draw_token(Ctx& ctx, Shared& sh, const float* row, int64_t n, const Draw& d) {
  ctx.sync();  // `sh` may still be read by a previous call
  if (ctx.tid() == 0) {
    sh.min_key = kNanKey;
    sh.min_id = 0xFFFFFFFFu;
  }
  ctx.sync();
  uint32_t local = kNanKey;
  for (int64_t i = ctx.tid(); i < n; i += ctx.threads()) {
    const uint32_t k = key_of(row[i]);
    local = k < local ? k : local;
  }
  ctx.min(&sh.min_key, local);
  ctx.sync();
  const uint32_t top = sh.min_key;
  if (top == kNanKey) return 0;  // only NaNs

  if (d.temperature == 0.0f) {  // argmax: a NaN at index 0 wins, else the first of the largest
    if (key_of(row[0]) == kNanKey) return 0;
    for (int64_t i = ctx.tid(); i < n; i += ctx.threads()) {
      if (key_of(row[i]) == top) {
        ctx.min(&sh.min_id, static_cast<uint32_t>(i));
        break;
      }
    }
    ctx.sync();
    return static_cast<int32_t>(sh.min_id);
  }

  uint32_t limit = kNanKey;
  if (d.top_k > 0 && d.top_k < n) {
    limit = radix_select(ctx, sh, n, 32, CountItem{row}, Fixed{static_cast<uint64_t>(d.top_k)}).key;
  }
  const WeightItem weights{row, limit, logit_of(top), d.temperature};
  uint64_t mass = 0;
  if (d.top_p < 1.0f) {
    const Selected cut = radix_select(ctx, sh, n, 32, weights, TopPNeed{d.top_p});
    const uint64_t v = weights.value(cut.key);
    mass = cut.below + ties_taken(cut, v) * v;  // through the last kept token
  }
  const Selected drawn = radix_select(ctx, sh, n, 32, weights, DrawNeed{philox_u24(d.seed, d.index, d.step), mass});
  // Among tokens of equal logit (equal weight v), the j-th by id.
  const uint64_t j = ties_taken(drawn, weights.value(drawn.key));
  const int id_bits = n > 1 ? bit_width(static_cast<uint64_t>(n - 1)) : 1;
  return static_cast<int32_t>(radix_select(ctx, sh, n, id_bits, TieItem{row, drawn.key}, Fixed{j}).key);
}

}  // namespace kernelllm::sample_block
