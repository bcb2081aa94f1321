// The shared-prefix (cascade) decode attention against a float64 softmax over each sequence's
// own pages and against the split kernel of attention.cuh, by normalized error: forks of one
// prompt (1, 3, 20, 40, 150) whose prompts end inside a page, suffixes of 0..N tokens, unrelated
// sequences in the same pass, GQA groups 1/2/4/8, head_dim 16/64/128, forks owning up to 199
// positions (several steps of each own-position kernel's warps), prompts of up to 1,000 tokens
// (16 tiles per prefix block), every case with the own positions by the split kernel and
// (group <= 4, head_dim 64/128) on the tensor cores, their rows loaded into registers and copied
// by the TMA, and the prefix kernel's rounded operands (the backend's default) against
// FlashAttention's arithmetic on the same data; the cache hints (o's weights into L2 as bulk
// requests or as lines, the prefix rows evict-first) leave the bits unchanged; then a CUDA graph
// captured once and replayed after the lengths and the plan change in device memory (TMA copies
// where they serve).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "engine/cuda/attention.cuh"
#include "engine/cuda/attention_shared.cuh"

namespace kernelllm {
namespace {

using namespace cuda_test;

constexpr int64_t kPt = 16, kLayers = 2, kLayer = 1, kWidth = 128, kPages = 256;

struct Shape {
  int64_t heads, kv_heads, hd;
};

// One pass: prompts, each with the suffix lengths of its forks (a fork's token sits at
// position prompt + suffix and reads its own private pages from the prompt's partial page on).
struct Scene {
  std::vector<float> pool;  // host copy of the cache, already rounded to the dtype
  std::vector<std::byte> pool_bytes;
  std::vector<int32_t> table, pos, seq;
  std::vector<std::vector<int32_t>> pages;
  cuda::SharedPrefixPlan plan;
  std::vector<float> q, ref;
  // FlashAttention's arithmetic in float64 otherwise: q rounded to the dtype, each weight
  // p = exp(s - max) rounded to it for P.V while the sum takes p unrounded, the output rounded.
  std::vector<float> flash;
};

float round_to(float x, DType t) {
  if (t == DType::bf16) return cpu::bf16_to_float(to_bf16_bits(x));
  if (t == DType::f16) return cpu::f16_to_float(to_f16_bits(x));
  return x;
}

Scene make_scene(DType t, const Shape& s, const std::vector<std::pair<int64_t, std::vector<int64_t>>>& prompts,
                 uint32_t seed) {
  Scene sc;
  const int64_t kv_dim = s.kv_heads * s.hd;
  sc.pool = random_vector(static_cast<size_t>(kPages * kLayers * 2 * kPt * kv_dim), seed);
  sc.pool_bytes = encode(sc.pool, t);
  // Physical pages in a scattered order.
  std::vector<int32_t> order(static_cast<size_t>(kPages));
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = 0; i < order.size(); ++i) std::swap(order[i], order[(i * 7919 + seed) % order.size()]);
  size_t next = 0;
  for (const auto& [prompt, suffixes] : prompts) {
    std::vector<int32_t> shared;
    for (int64_t p = 0; p < prompt / kPt; ++p) shared.push_back(order.at(next++));
    for (int64_t suffix : suffixes) {
      const int64_t pos = prompt + suffix;
      std::vector<int32_t> own = shared;
      while (static_cast<int64_t>(own.size()) <= pos / kPt) own.push_back(order.at(next++));
      sc.pos.push_back(static_cast<int32_t>(pos));
      sc.seq.push_back(static_cast<int32_t>(sc.pages.size()));
      sc.pages.push_back(own);
    }
  }
  const auto n = static_cast<int64_t>(sc.pos.size());
  sc.table.assign(static_cast<size_t>(n * kWidth), 0);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(sc.pages[static_cast<size_t>(i)].begin(), sc.pages[static_cast<size_t>(i)].end(),
              sc.table.begin() + i * kWidth);
  }
  std::vector<const std::vector<int32_t>*> ptrs;
  for (const auto& p : sc.pages) ptrs.push_back(&p);
  cuda::plan_shared_prefix(ptrs, sc.pos, sc.seq, kPt, s.heads / s.kv_heads, sc.plan);

  const int64_t q_dim = s.heads * s.hd, group = s.heads / s.kv_heads;
  sc.q = random_vector(static_cast<size_t>(n * q_dim), seed + 1, 2.0f);
  sc.ref.assign(sc.q.size(), 0.0f);
  sc.flash.assign(sc.q.size(), 0.0f);
  auto at = [&](int64_t i, int64_t p, int64_t kv, int64_t g, int64_t d) {
    const int64_t page = sc.pages[static_cast<size_t>(i)][static_cast<size_t>(p / kPt)];
    return static_cast<double>(
        sc.pool[static_cast<size_t>((((page * kLayers + kLayer) * 2 + kv) * kPt + p % kPt) * kv_dim + g * s.hd + d)]);
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = sc.pos[static_cast<size_t>(i)] + 1;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> w(static_cast<size_t>(len)), wf(static_cast<size_t>(len));
      double mx = -1e300, tot = 0, mxf = -1e300, totf = 0;
      for (int64_t p = 0; p < len; ++p) {
        double dot = 0, dotf = 0;
        for (int64_t d = 0; d < s.hd; ++d) {
          const float qv = sc.q[static_cast<size_t>(i * q_dim + h * s.hd + d)];
          dot += static_cast<double>(qv) * at(i, p, 0, g, d);
          dotf += static_cast<double>(round_to(qv, t)) * at(i, p, 0, g, d);
        }
        w[static_cast<size_t>(p)] = dot / std::sqrt(static_cast<double>(s.hd));
        wf[static_cast<size_t>(p)] = dotf / std::sqrt(static_cast<double>(s.hd));
        mx = std::max(mx, w[static_cast<size_t>(p)]);
        mxf = std::max(mxf, wf[static_cast<size_t>(p)]);
      }
      for (double& x : w) tot += (x = std::exp(x - mx));
      for (double& x : wf) totf += (x = std::exp(x - mxf));
      for (int64_t d = 0; d < s.hd; ++d) {
        double o = 0, of = 0;
        for (int64_t p = 0; p < len; ++p) {
          o += w[static_cast<size_t>(p)] * at(i, p, 1, g, d);
          of += static_cast<double>(round_to(static_cast<float>(wf[static_cast<size_t>(p)]), t)) * at(i, p, 1, g, d);
        }
        sc.ref[static_cast<size_t>(i * q_dim + h * s.hd + d)] = static_cast<float>(o / tot);
        sc.flash[static_cast<size_t>(i * q_dim + h * s.hd + d)] = round_to(static_cast<float>(of / totf), t);
      }
    }
  }
  return sc;
}

// Device buffers sized for the largest scene of a test; upload() refills them in place.
struct DeviceScene {
  cuda::DeviceBuffer pool, table, pos, seq, q, acc, ml, out, plan;
  int64_t max_n;
  DeviceScene(DType t, const Shape& s, int64_t max_n_, int64_t max_splits) : max_n(max_n_) {
    const int64_t kv_dim = s.kv_heads * s.hd, q_dim = s.heads * s.hd;
    pool = poisoned(static_cast<size_t>(kPages * kLayers * 2 * kPt * kv_dim) * dtype_size(t));
    table = poisoned(static_cast<size_t>(max_n * kWidth) * 4);
    pos = poisoned(static_cast<size_t>(max_n) * 4);
    seq = poisoned(static_cast<size_t>(max_n) * 4);
    q = poisoned(static_cast<size_t>(max_n * q_dim) * 4);
    acc = poisoned(static_cast<size_t>(max_n * s.heads * max_splits * s.hd) * 4);
    ml = poisoned(static_cast<size_t>(max_n * s.heads * max_splits * 2) * 4);
    out = poisoned(static_cast<size_t>(max_n * q_dim) * dtype_size(t));
    plan = poisoned(static_cast<size_t>(6 * max_n) * 4);
  }
  void upload(const Scene& sc) {
    auto put = [](cuda::DeviceBuffer& b, const void* p, size_t bytes, size_t at = 0) {
      ASSERT_EQ(cudaMemcpy(static_cast<char*>(b.get()) + at, p, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    };
    put(pool, sc.pool_bytes.data(), sc.pool_bytes.size());
    put(table, sc.table.data(), sc.table.size() * 4);
    put(pos, sc.pos.data(), sc.pos.size() * 4);
    put(seq, sc.seq.data(), sc.seq.size() * 4);
    put(q, sc.q.data(), sc.q.size() * 4);
    const std::vector<int32_t>* fields[] = {&sc.plan.ctx_begin,  &sc.plan.item_seq,   &sc.plan.item_prefix,
                                            &sc.plan.item_first, &sc.plan.item_count, &sc.plan.members};
    for (size_t f = 0; f < 6; ++f) {
      put(plan, fields[f]->data(), fields[f]->size() * 4, f * static_cast<size_t>(max_n) * 4);
    }
  }
  cuda::AttentionArgs args(const Shape& s, int64_t n, int64_t splits) const {
    cuda::AttentionArgs a;
    a.q = q.as<float>();
    a.n_tokens = n;
    a.heads = s.heads;
    a.kv_heads = s.kv_heads;
    a.head_dim = s.hd;
    a.seq = seq.as<int32_t>();
    a.pos = pos.as<int32_t>();
    a.block_table = table.as<int32_t>();
    a.table_width = kWidth;
    a.kv = cuda::KvLayout{pool.get(), kLayers, kPt, s.kv_heads * s.hd, kPages};
    a.layer = kLayer;
    a.splits = splits;
    a.partial_acc = acc.as<float>();
    a.partial_ml = ml.as<float>();
    a.out = out.get();
    return a;
  }
  cuda::SharedPrefixArgs shared() const {
    const int32_t* p = plan.as<int32_t>();
    cuda::SharedPrefixArgs sp;
    sp.item_seq = p + max_n;
    sp.item_prefix = p + 2 * max_n;
    sp.item_first = p + 3 * max_n;
    sp.item_count = p + 4 * max_n;
    sp.members = p + 5 * max_n;
    return sp;
  }
};

double out_tolerance(DType t) { return t == DType::bf16 ? 8e-3 : 1e-3; }

class SharedPrefix : public ::testing::TestWithParam<DType> {};

void check_case(DType t, const Shape& s, const std::vector<std::pair<int64_t, std::vector<int64_t>>>& prompts,
                int64_t suffix_splits, int64_t prefix_splits, bool expect_shared, int64_t min_positions = 0) {
  const Scene sc = make_scene(t, s, prompts, 17);
  const auto n = static_cast<int64_t>(sc.pos.size());
  EXPECT_EQ(sc.plan.shared, expect_shared);
  // Every fork of a prompt with >= 2 forks and >= 1 full page starts its own part at the
  // prompt's last page boundary.
  size_t i = 0;
  for (const auto& [prompt, suffixes] : prompts) {
    for (size_t f = 0; f < suffixes.size(); ++f, ++i) {
      const int64_t want = suffixes.size() >= 2 ? prompt / kPt * kPt : 0;
      EXPECT_EQ(sc.plan.ctx_begin[i], want) << "token " << i;
    }
  }
  DeviceScene d(t, s, n, suffix_splits + prefix_splits);
  d.upload(sc);
  cuda::attention(t, d.args(s, n, 3), nullptr);
  const auto plain = download(d.out, sc.ref.size(), t);
  cuda::AttentionArgs a = d.args(s, n, suffix_splits + prefix_splits);
  a.ctx_begin = d.plan.as<int32_t>();
  a.min_split_positions = min_positions;
  // The own positions by the split kernel, then (where supported) on the tensor cores.
  cuda::shared_prefix_attention(t, a, d.shared(), suffix_splits, prefix_splits, nullptr, false);
  const double e_split_suffix = rel_error(download(d.out, sc.ref.size(), t), sc.ref);
  EXPECT_LT(e_split_suffix, out_tolerance(t));
  // On the tensor cores with the rows loaded into registers (the pool's page count unknown), then
  // (where suffix_tma_serves) copied into shared memory by the TMA.
  const int64_t pool_pages = a.kv.pages;
  a.kv.pages = 0;
  cuda::shared_prefix_attention(t, a, d.shared(), suffix_splits, prefix_splits, nullptr, true);
  const double e_regs = rel_error(download(d.out, sc.ref.size(), t), sc.ref);
  a.kv.pages = pool_pages;
  cuda::shared_prefix_attention(t, a, d.shared(), suffix_splits, prefix_splits, nullptr, true);
  const auto got = download(d.out, sc.ref.size(), t);
  const bool mma = cuda::suffix_mma_supported(t, s.hd, s.heads / s.kv_heads);
  const bool tma = mma && cuda::suffix_tma_serves(t, a);
  {
    // The next weights asked into L2 by the prefix kernel's idle warps (4,096 rows of 8 KB in 4
    // parts, 1 KB of each): a hint, so the output has the same bits.
    const cuda::DeviceBuffer next = poisoned(size_t{4096} * 8192);
    cuda::SharedPrefixArgs with_next = d.shared();
    with_next.next_weights = cuda::L2Prefetch{next.get(), 4096, 8192, 2048, 4, 1024};
    cuda::shared_prefix_attention(t, a, with_next, suffix_splits, prefix_splits, nullptr, true);
    EXPECT_EQ(download(d.out, sc.ref.size(), t), got);
    // The same asked as 128-byte lines (the backend's default) rather than bulk requests.
    with_next.next_weights.lines = true;
    cuda::shared_prefix_attention(t, a, with_next, suffix_splits, prefix_splits, nullptr, true);
    EXPECT_EQ(download(d.out, sc.ref.size(), t), got);
    // The prefix rows' loads under the evict-first policy: a hint too.
    with_next.kv_evict_first = true;
    cuda::shared_prefix_attention(t, a, with_next, suffix_splits, prefix_splits, nullptr, true);
    EXPECT_EQ(download(d.out, sc.ref.size(), t), got);
  }
  if (min_positions > 0) {
    // The plain split kernel with the same floor: splits past the positions stay empty.
    cuda::AttentionArgs p = d.args(s, n, suffix_splits + prefix_splits);
    p.min_split_positions = min_positions;
    cuda::attention(t, p, nullptr);
    const double e = rel_error(download(d.out, sc.ref.size(), t), sc.ref);
    std::printf("[split kernel %s, %lld splits of >= %lld positions] rel err vs f64 %.3g\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(suffix_splits + prefix_splits),
                static_cast<long long>(min_positions), e);
    EXPECT_LT(e, out_tolerance(t));
  }
  const double e_ref = rel_error(got, sc.ref), e_plain = rel_error(got, plain), e_old = rel_error(plain, sc.ref);
  std::printf("[shared prefix %s heads %lld/%lld hd %lld n %lld] rel err vs f64 %.3g (own positions %s; loaded "
              "into registers %.3g; by the split kernel %.3g; plain split kernel %.3g), vs split kernel %.3g\n",
              std::string(dtype_name(t)).c_str(), static_cast<long long>(s.heads), static_cast<long long>(s.kv_heads),
              static_cast<long long>(s.hd), static_cast<long long>(n), e_ref,
              tma ? "on tensor cores, by TMA" : mma ? "on tensor cores" : "split kernel", e_regs, e_split_suffix, e_old,
              e_plain);
  EXPECT_LT(e_ref, out_tolerance(t));
  EXPECT_LT(e_regs, 1.5 * e_old + 1e-4);
  // Same products in the same order: the two loaders differ only where the splits are cut.
  if (tma) {
    EXPECT_LT(e_ref, 1.05 * e_regs + 1e-6);
  }
  EXPECT_LT(e_ref, 1.5 * e_old + 1e-4);
  EXPECT_LT(e_split_suffix, 1.5 * e_old + 1e-4);
  EXPECT_LT(e_plain, out_tolerance(t));

  // The prefix kernel with its operands rounded to the dtype (SharedPrefixArgs::low_halves off):
  // no less accurate than FlashAttention's arithmetic on the same data.
  cuda::SharedPrefixArgs rounded = d.shared();
  rounded.low_halves = false;
  cuda::shared_prefix_attention(t, a, rounded, suffix_splits, prefix_splits, nullptr, true);
  const auto got_rounded = download(d.out, sc.ref.size(), t);
  const double e_rounded = rel_error(got_rounded, sc.ref), e_flash = rel_error(sc.flash, sc.ref);
  std::printf("[shared prefix %s, operands rounded] rel err vs f64 %.3g (FlashAttention's arithmetic %.3g)\n",
              std::string(dtype_name(t)).c_str(), e_rounded, e_flash);
  EXPECT_LT(e_rounded, out_tolerance(t));
  EXPECT_LT(e_rounded, 1.25 * e_flash + 1e-4);
}

TEST_P(SharedPrefix, MatchesReferenceAndSplitKernel) {
  const DType t = GetParam();
  std::vector<int64_t> twenty(20), forty(40);
  for (size_t i = 0; i < twenty.size(); ++i) twenty[i] = static_cast<int64_t>(i * 7 % 23);
  for (size_t i = 0; i < forty.size(); ++i) forty[i] = static_cast<int64_t>(i % 5);
  // The 8B shape: 20 forks of a 300-token prompt (ends inside a page) plus an unrelated sequence.
  check_case(t, {32, 8, 128}, {{300, twenty}, {45, {3}}}, 2, 5, true);
  check_case(t, {32, 8, 128}, {{37, {0, 5, 40}}}, 1, 16, true);
  check_case(t, {32, 8, 128}, {{64, {0, 1}}, {16, {0, 0, 2}}, {10, {4, 4}}}, 3, 3, true);
  check_case(t, {32, 8, 128}, {{200, {9}}}, 2, 4, false);  // one fork: nothing shared
  check_case(t, {8, 8, 64}, {{123, forty}}, 2, 7, true);   // group 1: 40 rows in one block
  check_case(t, {8, 1, 64}, {{77, twenty}}, 1, 6, true);   // group 8: 20 forks -> 2 blocks of 16
  // Group 1, 150 forks: two items (128 + 22 rows).
  std::vector<int64_t> many(150);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i % 5);
  check_case(t, {8, 8, 64}, {{50, many}}, 1, 3, true);
  // A 1,000-token prompt in 2 prefix splits: 16 tiles of 32 positions per prefix block.
  check_case(t, {32, 8, 128}, {{1000, twenty}}, 2, 2, true);
  check_case(t, {4, 2, 16}, {{50, forty}, {33, {1, 2, 3}}}, 2, 2, true);
  // 18 forks owning 128..199 positions at 2 suffix splits: the k = 20 instance of the split
  // kernel (bf16: 8-warp blocks held to three per SM), several steps of 8 positions per warp.
  std::vector<int64_t> long18(18);
  for (size_t i = 0; i < long18.size(); ++i) long18[i] = static_cast<int64_t>(120 + i * 37 % 71);
  check_case(t, {32, 8, 128}, {{40, long18}}, 2, 5, true);
  // A split takes at least P positions. The forks of the 300-token prompt own 12..34 positions
  // (the 12 of its partial page, then 0..22 of their own): with 8 splits of >= 4, 3 to 8 take
  // positions; of >= 64, only the first. The 77-token prompt's own 13..35: 4 splits of >= 5.
  check_case(t, {32, 8, 128}, {{300, twenty}, {45, {3}}}, 8, 8, true, 4);
  check_case(t, {32, 8, 128}, {{300, twenty}, {45, {3}}}, 8, 8, true, 64);
  check_case(t, {8, 1, 64}, {{77, twenty}}, 4, 6, true, 5);
}

// The pass is captured once; the replay after new lengths, pages and plan are written into the
// same device buffers must match the new reference (nothing length-dependent is baked in).
TEST_P(SharedPrefix, GraphReplayWithNewLengths) {
  const DType t = GetParam();
  const Shape s{32, 8, 128};
  std::vector<int64_t> a(20), b(20);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<int64_t>(i % 3);
    b[i] = static_cast<int64_t>(17 + i * 5 % 11);
  }
  const Scene first = make_scene(t, s, {{500, a}}, 5);
  const Scene second = make_scene(t, s, {{130, {b.begin(), b.begin() + 10}}, {620, {b.begin() + 10, b.end()}}}, 6);
  ASSERT_TRUE(first.plan.shared && second.plan.shared);
  const int64_t n = 20, ss = 2, ps = 8;
  DeviceScene d(t, s, n, ss + ps);
  d.upload(first);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::AttentionArgs args = d.args(s, n, ss + ps);
  args.ctx_begin = d.plan.as<int32_t>();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cuda::shared_prefix_attention(t, args, d.shared(), ss, ps, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  const double e1 = rel_error(download(d.out, first.ref.size(), t), first.ref);
  d.upload(second);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  const double e2 = rel_error(download(d.out, second.ref.size(), t), second.ref);
  std::printf("[shared prefix graph %s] rel err first %.3g, after new lengths %.3g\n",
              std::string(dtype_name(t)).c_str(), e1, e2);
  EXPECT_LT(e1, out_tolerance(t));
  EXPECT_LT(e2, out_tolerance(t));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SharedPrefix, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace kernelllm
