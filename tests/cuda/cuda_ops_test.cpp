// Each CUDA op against the CPU reference (engine/cpu/ops.h, or a float64 loop where the CPU
// backend has no standalone op), by normalized error ||gpu - ref|| / ||ref|| on random inputs;
// inputs are rounded to the op's dtype first, so the error measures the op, not the rounding.
// Tolerances: f32 outputs 1e-5 (fp32 arithmetic, different summation order; projections 3e-5,
// see Projections); bf16 outputs 8e-3
// and f16 outputs 1e-3 (one rounding of the output: 2^-8 and 2^-11 relative, on average far less).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "kernelllm/engine/sampler.h"
#include "engine/cuda/argmax.cuh"
#include "engine/cuda/attention.cuh"
#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/embedding.cuh"
#include "engine/cuda/gemm.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/rmsnorm.cuh"
#include "engine/cuda/rope.cuh"
#include "engine/cuda/swiglu.cuh"

namespace kernelllm {
namespace {

using namespace cuda_test;

double out_tolerance(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 8e-3 : 1e-3; }

class OpTest : public ::testing::TestWithParam<DType> {};

// Rows shorter than a block, the 8B width (two rounds of 8 loads per thread), and a width with a
// partial last round.
TEST_P(OpTest, Embedding) {
  const DType t = GetParam();
  const int64_t vocab = 1000;
  for (int64_t hidden : {96, 4096, 5000}) {
    auto table = random_vector(static_cast<size_t>(vocab * hidden), 1);
    const auto bytes = encode(table, t);
    const std::vector<int32_t> ids = {5, 999, 0, 5, 417};
    auto d_table = upload(bytes.data(), bytes.size());
    auto d_ids = upload(ids);
    auto d_out = poisoned(ids.size() * static_cast<size_t>(hidden) * 4);
    cuda::embedding(t, d_table.get(), d_ids.as<int32_t>(), 5, hidden, d_out.as<float>(), nullptr);
    const auto got = download(d_out, ids.size() * static_cast<size_t>(hidden));
    std::vector<float> ref;
    for (int32_t id : ids) ref.insert(ref.end(), table.begin() + id * hidden, table.begin() + (id + 1) * hidden);
    EXPECT_EQ(rel_error(got, ref), 0.0) << "hidden " << hidden;
  }
}

// embed_rmsnorm: the same x and normed rows, bit for bit, as embedding() then rmsnorm(), for row
// lengths of 1, 2, 4 and 8 float4 chunks a thread (96, 2,048, 4,096, 6,000) and the two-kernel
// fallback (98: not a multiple of 4; 12,288: too long for registers).
TEST_P(OpTest, EmbedRmsNormEqualsTwoKernels) {
  const DType t = GetParam();
  const int64_t vocab = 300;
  for (const int64_t hidden : {4096, 96, 2048, 6000, 98, 12288}) {
    auto table = random_vector(static_cast<size_t>(vocab * hidden), 3);
    const auto bytes = encode(table, t);
    const std::vector<float> weight = random_vector(static_cast<size_t>(hidden), 4);
    const std::vector<int32_t> ids = {5, 299, 0, 5, 117, 42};
    const auto rows = static_cast<int64_t>(ids.size());
    auto d_table = upload(bytes.data(), bytes.size());
    auto d_ids = upload(ids);
    auto d_w = upload(weight);
    const size_t elems = ids.size() * static_cast<size_t>(hidden);
    auto x1 = poisoned(elems * 4), x2 = poisoned(elems * 4);
    auto o1 = poisoned(elems * dtype_size(t)), o2 = poisoned(elems * dtype_size(t));
    cuda::embedding(t, d_table.get(), d_ids.as<int32_t>(), rows, hidden, x1.as<float>(), nullptr);
    cuda::rmsnorm(t, x1.as<float>(), d_w.as<float>(), rows, hidden, 1e-5f, nullptr, o1.get(), nullptr);
    cuda::embed_rmsnorm(t, d_table.get(), d_ids.as<int32_t>(), rows, hidden, d_w.as<float>(), 1e-5f, x2.as<float>(),
                        o2.get(), nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(download(x2, elems), download(x1, elems)) << "hidden " << hidden;
    EXPECT_EQ(download(o2, elems, t), download(o1, elems, t)) << "hidden " << hidden;
  }
}

// Row lengths for each kernel: float4 chunks in registers (1, 2, 4 and 8 per thread: 96, 2,048,
// 4,096, 6,000), and the strided loop (98: not a multiple of 4; 12,288: too long for registers).
TEST_P(OpTest, RmsNormAndAddRmsNorm) {
  const DType t = GetParam();
  for (const int64_t n : {4096, 96, 2048, 6000, 98, 12288}) {
    const int64_t rows = 7;
    auto x = random_vector(static_cast<size_t>(rows * n), 2);
    auto delta = random_vector(x.size(), 3);
    auto w = random_vector(static_cast<size_t>(n), 4, 0.5f);
    auto d_x = upload(x);
    auto d_delta = upload(delta);
    auto d_w = upload(w);
    auto d_out = poisoned(x.size() * dtype_size(t));
    const float eps = 1e-5f;
    cuda::rmsnorm(t, d_x.as<float>(), d_w.as<float>(), rows, n, eps, nullptr, d_out.get(), nullptr);
    std::vector<float> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x.data() + r * n, w.data(), n, eps, ref.data() + r * n);
    const double e1 = rel_error(download(d_out, x.size(), t), ref);
    EXPECT_LT(e1, out_tolerance(t)) << "n " << n;

    // Rows picked by index (the final norm of the rows that produce logits).
    const std::vector<int32_t> pick = {6, 0, 3};
    auto d_pick = upload(pick);
    auto d_picked = poisoned(pick.size() * n * dtype_size(t));
    cuda::rmsnorm(t, d_x.as<float>(), d_w.as<float>(), 3, n, eps, d_pick.as<int32_t>(), d_picked.get(), nullptr);
    std::vector<float> ref_picked;
    for (int32_t r : pick) ref_picked.insert(ref_picked.end(), ref.begin() + r * n, ref.begin() + (r + 1) * n);
    EXPECT_LT(rel_error(download(d_picked, ref_picked.size(), t), ref_picked), out_tolerance(t)) << "n " << n;

    cuda::add_rmsnorm(t, d_x.as<float>(), d_delta.as<float>(), d_w.as<float>(), rows, n, eps, d_out.get(), nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x.data() + r * n, w.data(), n, eps, ref.data() + r * n);
    const double e2 = rel_error(download(d_out, x.size(), t), ref);
    EXPECT_LT(e2, out_tolerance(t)) << "n " << n;
    EXPECT_LT(rel_error(download(d_x, x.size()), x), 1e-7) << "n " << n;

    // A delta in three parts (band_gemm_parts' outputs), added to each other in order first.
    std::vector<float> parts = random_vector(3 * x.size(), 5);
    auto d_parts = upload(parts);
    cuda::add_rmsnorm(t, d_x.as<float>(), d_parts.as<float>(), d_w.as<float>(), rows, n, eps, d_out.get(), nullptr, 3);
    for (size_t i = 0; i < x.size(); ++i) x[i] += (parts[i] + parts[x.size() + i]) + parts[2 * x.size() + i];
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x.data() + r * n, w.data(), n, eps, ref.data() + r * n);
    EXPECT_LT(rel_error(download(d_out, x.size(), t), ref), out_tolerance(t)) << "n " << n << ", 3 parts";
    EXPECT_EQ(download(d_x, x.size()), x) << "n " << n << ", 3 parts";
    if (n == 4096) RecordProperty("rmsnorm_err", std::to_string(e1) + " / " + std::to_string(e2));
    std::printf("[rmsnorm %s n=%lld] rel err %.3g, add+norm %.3g\n", std::string(dtype_name(t)).c_str(),
                static_cast<long long>(n), e1, e2);
  }
}

// From an fp32 gate_up (the GEMV's) and from one in the compute dtype (cuBLASLt's); 8 outputs
// per thread (1,000) and one (1,004: not a multiple of 8).
TEST_P(OpTest, SwiGlu) {
  const DType t = GetParam();
  const int64_t n_tok = 3;
  for (const int64_t inter : {int64_t{1000}, int64_t{1004}}) {
    for (DType in : {DType::f32, t}) {
      auto gu = random_vector(static_cast<size_t>(n_tok * 2 * inter), 5, 2.0f);
      const std::vector<std::byte> bytes = encode(gu, in);  // gu now holds the rounded inputs
      auto d_gu = upload(bytes);
      auto d_out = poisoned(static_cast<size_t>(n_tok * inter) * dtype_size(t));
      cuda::swiglu(t, in, d_gu.get(), n_tok, inter, d_out.get(), nullptr);
      std::vector<float> ref(static_cast<size_t>(n_tok * inter));
      for (int64_t r = 0; r < n_tok; ++r) {
        cpu::silu_mul(gu.data() + r * 2 * inter, gu.data() + r * 2 * inter + inter, inter, ref.data() + r * inter);
      }
      const double e = rel_error(download(d_out, ref.size(), t), ref);
      std::printf("[swiglu %s from %s, inter %lld] rel err %.3g\n", std::string(dtype_name(t)).c_str(),
                  std::string(dtype_name(in)).c_str(), static_cast<long long>(inter), e);
      EXPECT_LT(e, out_tolerance(t));
    }
  }
}

// y = x . W^T by cuBLASLt and by the GEMV (n <= 8), against float64 on the rounded inputs: only
// fp32 accumulation error remains (measured up to 8e-6 at K = 14336; some cuBLASLt algorithms
// reach 1.7e-5 there), hence 3e-5. cuBLASLt with its heuristic's first choice and with the
// measured preferences of gemm.cu (Llama-3.1-8B's qkv and down at 17..24 tokens). Then the band
// GEMM's parts form (f16/bf16, compute capability 9.0+): the sum of its parts in order, at 1 to 8
// parts (more parts than stages at 64 columns: the empty ones must be zeros), the backend's choice,
// and a grid held to 8 blocks (several waves).
constexpr double kProjTolerance = 3e-5;
TEST_P(OpTest, Projections) {
  const DType t = GetParam();
  cuda::Gemm gemms[2];
  ASSERT_TRUE(gemms[0].init(t).ok());
  ASSERT_TRUE(gemms[1].init(t, true).ok());
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1024, 4096}, {4096, 14336}, {200, 64}, {6144, 4096}}) {
    auto w = random_vector(static_cast<size_t>(rows * cols), 6, 0.02f);
    const auto wb = encode(w, t);
    auto d_w = upload(wb.data(), wb.size());
    for (int64_t n : {1, 3, 8, 20, 77}) {
      if (n == 77 && rows * cols > 10'000'000) continue;  // keeps the float64 reference quick
      auto x = random_vector(static_cast<size_t>(n * cols), static_cast<uint32_t>(7 + n));
      const auto xb = encode(x, t);
      auto d_x = upload(xb.data(), xb.size());
      std::vector<float> ref(static_cast<size_t>(n * rows));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          double s = 0;
          for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w[r * cols + c]) * x[i * cols + c];
          ref[static_cast<size_t>(i * rows + r)] = static_cast<float>(s);
        }
      }
      double eg = 0;
      for (int tuned = 0; tuned < 2; ++tuned) {
        cuda::Gemm& gemm = gemms[tuned];
        auto d_y = poisoned(ref.size() * 4);
        ASSERT_TRUE(gemm.run(d_w.get(), rows, cols, d_x.get(), n, d_y.as<float>(), nullptr).ok());
        const double e = rel_error(download(d_y, ref.size()), ref);
        eg = std::max(eg, e);
        EXPECT_LT(e, kProjTolerance) << "gemm rows " << rows << " cols " << cols << " n " << n << " tuned " << tuned;
        {  // accumulating into y, which holds the product already: twice the product
          ASSERT_TRUE(gemm.run(d_w.get(), rows, cols, d_x.get(), n, d_y.get(), DType::f32, nullptr, true).ok());
          std::vector<float> twice(ref);
          for (float& v : twice) v *= 2.0f;
          EXPECT_LT(rel_error(download(d_y, ref.size()), twice), kProjTolerance)
              << "gemm += rows " << rows << " n " << n << " tuned " << tuned;
        }
        if (t != DType::f32) {  // y in the compute dtype: the fp32 result rounded once
          auto d_yt = poisoned(ref.size() * dtype_size(t));
          ASSERT_TRUE(gemm.run(d_w.get(), rows, cols, d_x.get(), n, d_yt.get(), t, nullptr).ok());
          const double et = rel_error(download(d_yt, ref.size(), t), ref);
          EXPECT_LT(et, out_tolerance(t)) << "gemm to " << dtype_name(t) << " rows " << rows << " n " << n;
        }
      }
      double ev = -1;
      if (cuda::gemv_supported(t, cols, n)) {
        auto d_y2 = poisoned(ref.size() * 4);
        cuda::gemv(t, d_w.get(), rows, cols, d_x.get(), n, d_y2.as<float>(), nullptr);
        ev = rel_error(download(d_y2, ref.size()), ref);
        EXPECT_LT(ev, kProjTolerance) << "gemv rows " << rows << " cols " << cols << " n " << n;
      }
      double eb = -1;
      if (cuda::band_supported(t, cols, n) && major >= 9) {
        const int sms = cuda::current_sm_count(), chosen = cuda::band_parts_for({}, rows, cols, n, sms);
        for (const int parts : {1, 2, 3, 8, chosen}) {
          for (const int blocks : {0, 8}) {
            auto d_parts = poisoned(static_cast<size_t>(parts) * ref.size() * 4);
            const Status st = cuda::band_gemm_parts({0, blocks}, t, d_w.get(), rows, cols, d_x.get(), n,
                                                    d_parts.as<float>(), parts, sms, nullptr);
            ASSERT_TRUE(st.ok()) << st.to_string();
            const std::vector<float> got = download(d_parts, static_cast<size_t>(parts) * ref.size());
            std::vector<float> sum(got.begin(), got.begin() + static_cast<int64_t>(ref.size()));
            for (int q = 1; q < parts; ++q) {
              for (size_t i = 0; i < sum.size(); ++i) sum[i] += got[static_cast<size_t>(q) * ref.size() + i];
            }
            const double e = rel_error(sum, ref);
            eb = std::max(eb, e);
            EXPECT_LT(e, kProjTolerance) << "band parts " << parts << " blocks " << blocks << " rows " << rows
                                         << " cols " << cols << " n " << n;
          }
        }
      }
      std::printf("[proj %s %lldx%lld n=%lld] gemm rel err %.3g (worse of both choices), gemv %.3g, band parts %.3g\n",
                  std::string(dtype_name(t)).c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
                  static_cast<long long>(n), eg, ev, eb);
    }
  }
}

// The decode form of attention_case's pass with RoPE and the KV write folded into the split
// kernel (AttentionArgs::rope_qkv): the last token of each sequence, whose own K and V rows are
// poisoned first. The kernel must write those rows as rope_write_kv wrote them, give the
// rotated queries to rope_q_out (q stays null) and attend as the unfolded kernel did.
void fused_rope_decode_case(DType t, const cuda::AttentionArgs& a, const cuda::DeviceBuffer& pool, int64_t pool_elems,
                            const std::vector<float>& qkv,
                            const std::vector<float>& q_ref, const std::vector<float>& ref,
                            const std::vector<int64_t>& lens, const std::vector<int32_t>& pos,
                            const std::vector<int32_t>& page, const std::vector<float>& inv, int64_t splits) {
  const int64_t q_dim = a.heads * a.head_dim, kv_dim = a.kv.kv_dim, row = q_dim + 2 * kv_dim;
  const int64_t pt = a.kv.page_tokens, es = static_cast<int64_t>(dtype_size(t));
  std::vector<int32_t> dpos, dseq;
  std::vector<float> dqkv, dref, dq_ref;
  std::vector<int64_t> k_at;  // element offset of each decode token's K row in the pool
  int64_t first = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int64_t last = first + lens[s] - 1;
    dpos.push_back(pos[static_cast<size_t>(last)]);
    dseq.push_back(static_cast<int32_t>(s));
    dqkv.insert(dqkv.end(), qkv.begin() + last * row, qkv.begin() + (last + 1) * row);
    dref.insert(dref.end(), ref.begin() + last * q_dim, ref.begin() + (last + 1) * q_dim);
    dq_ref.insert(dq_ref.end(), q_ref.begin() + last * q_dim, q_ref.begin() + (last + 1) * q_dim);
    const int64_t pg = page[static_cast<size_t>(last)];
    k_at.push_back((((pg * a.kv.layers + a.layer) * 2) * pt + pos[static_cast<size_t>(last)] % pt) * kv_dim);
    first += lens[s];
  }
  const auto n = static_cast<int64_t>(dpos.size());
  // The rows as rope_write_kv wrote them.
  const std::vector<float> pool_before = download(pool, static_cast<size_t>(pool_elems), t);
  auto own_rows = [&](const std::vector<float>& cache) {
    std::vector<float> r;
    for (int64_t at : k_at) {
      r.insert(r.end(), cache.begin() + at, cache.begin() + at + kv_dim);
      r.insert(r.end(), cache.begin() + at + pt * kv_dim, cache.begin() + at + (pt + 1) * kv_dim);
    }
    return r;
  };
  auto d_qkv = upload(dqkv);
  auto d_pos = upload(dpos);
  auto d_seq = upload(dseq);
  auto d_inv = upload(inv);
  auto d_q = poisoned(static_cast<size_t>(n * q_dim) * 4);
  auto d_out = poisoned(static_cast<size_t>(n * q_dim) * dtype_size(t));
  cuda::AttentionArgs b = a;
  b.q = nullptr;
  b.n_tokens = n;
  b.pos = d_pos.as<int32_t>();
  b.seq = d_seq.as<int32_t>();
  b.out = d_out.get();
  b.rope_qkv = d_qkv.get();
  b.rope_qkv_f32 = true;
  b.rope_inv_freq = d_inv.as<float>();
  b.rope_q_out = d_q.as<float>();
  ASSERT_TRUE(cuda::attention_partial_folds_rope(t, b, splits));
  for (int warps : {8, 16}) {
    for (int64_t at : k_at) {
      char* k = static_cast<char*>(a.kv.pool) + at * es;
      ASSERT_EQ(cudaMemset(k, 0xff, static_cast<size_t>(kv_dim * es)), cudaSuccess);
      ASSERT_EQ(cudaMemset(k + pt * kv_dim * es, 0xff, static_cast<size_t>(kv_dim * es)), cudaSuccess);
    }
    cuda::attention(t, b, nullptr, warps);
    const double e = rel_error(download(d_out, dref.size(), t), dref);
    const double eq = rel_error(download(d_q, dq_ref.size()), dq_ref);
    const double ekv = rel_error(own_rows(download(pool, static_cast<size_t>(pool_elems), t)), own_rows(pool_before));
    std::printf("[fused rope decode %s heads %lld/%lld hd %lld splits %lld warps %d] rel err %.3g, q %.3g, kv rows %.3g\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads),
                static_cast<long long>(a.head_dim), static_cast<long long>(splits), warps, e, eq, ekv);
    EXPECT_LT(e, out_tolerance(t) + 1e-5);
    EXPECT_LT(eq, 1e-6);
    // The same formula rounded the same way (a contraction into an FMA may move one element by
    // one unit of the cache dtype).
    EXPECT_LT(ekv, t == DType::f32 ? 1e-6 : 1e-3);
    ASSERT_EQ(cudaMemset(d_out.get(), 0xff, static_cast<size_t>(n * q_dim) * dtype_size(t)), cudaSuccess);
  }
}

// RoPE + KV write then paged attention, against a float64 reference that applies the CPU
// backend's RoPE (cpu::rope_cos_sin / rope_apply) and a plain causal softmax per head.
void attention_case(DType t, int64_t heads, int64_t kv_heads, int64_t hd, int64_t splits) {
  ModelConfig c;
  c.head_dim = hd;
  c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 8192};
  const std::vector<float> inv = rope_inv_freq(c);
  const int64_t pt = 16, layers = 2, layer = 1, kv_dim = kv_heads * hd, q_dim = heads * hd;
  // Sequences of 45, 70 and 203 tokens on scattered pages (the last spans four 64-position
  // tiles of the prefill kernel); every token is a query (causal).
  const std::vector<int64_t> lens = {45, 70, 203};
  const int64_t width = 13, num_pages = 3 * width;
  std::vector<int32_t> table(static_cast<size_t>(3 * width));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7 + 5) % table.size());
  // Every position's qkv goes through rope_write_kv (to fill the cache); attention runs for all.
  std::vector<int32_t> pos, seq, page;
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t p = 0; p < lens[static_cast<size_t>(s)]; ++p) {
      pos.push_back(static_cast<int32_t>(p));
      seq.push_back(static_cast<int32_t>(s));
      page.push_back(table[static_cast<size_t>(s * width + p / pt)]);
    }
  }
  const auto T = static_cast<int64_t>(pos.size());
  auto qkv = random_vector(static_cast<size_t>(T * (q_dim + 2 * kv_dim)), 11);
  auto d_qkv = upload(qkv);
  auto d_pos = upload(pos);
  auto d_seq = upload(seq);
  auto d_page = upload(page);
  auto d_table = upload(table);
  auto d_inv = upload(inv);
  cuda::DeviceBuffer pool = poisoned(static_cast<size_t>(num_pages * layers * 2 * pt * kv_dim) * dtype_size(t));
  auto d_q = poisoned(static_cast<size_t>(T * q_dim) * 4);
  const cuda::KvLayout kv{pool.get(), layers, pt, kv_dim};
  cuda::rope_write_kv(t, DType::f32, d_qkv.get(), T, heads, kv_heads, hd, d_pos.as<int32_t>(), d_page.as<int32_t>(),
                      d_inv.as<float>(), kv, layer, d_q.as<float>(), nullptr);
  // Reference: rotated q, k (k rounded to the cache dtype), v rounded.
  const int64_t half = hd / 2;
  std::vector<float> q_ref(static_cast<size_t>(T * q_dim)), k_ref(static_cast<size_t>(T * kv_dim)),
      v_ref(static_cast<size_t>(T * kv_dim));
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t i = 0; i < T; ++i) {
    const float* row = qkv.data() + i * (q_dim + 2 * kv_dim);
    std::copy_n(row, q_dim, q_ref.data() + i * q_dim);
    std::copy_n(row + q_dim, kv_dim, k_ref.data() + i * kv_dim);
    std::copy_n(row + q_dim + kv_dim, kv_dim, v_ref.data() + i * kv_dim);
    cpu::rope_cos_sin(inv, pos[static_cast<size_t>(i)], cs.data(), sn.data());
    for (int64_t h = 0; h < heads; ++h) cpu::rope_apply(q_ref.data() + i * q_dim + h * hd, cs.data(), sn.data(), half);
    for (int64_t h = 0; h < kv_heads; ++h) cpu::rope_apply(k_ref.data() + i * kv_dim + h * hd, cs.data(), sn.data(), half);
  }
  EXPECT_LT(rel_error(download(d_q, q_ref.size()), q_ref), 1e-6);
  encode(k_ref, t);
  encode(v_ref, t);

  std::vector<float> ref(static_cast<size_t>(T * q_dim));
  const int64_t group = heads / kv_heads;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t base = i - pos[static_cast<size_t>(i)];  // first token of the same sequence
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> sc(static_cast<size_t>(pos[static_cast<size_t>(i)] + 1));
      double mx = -1e300;
      for (size_t p = 0; p < sc.size(); ++p) {
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) {
          s += static_cast<double>(q_ref[i * q_dim + h * hd + d]) * k_ref[(base + static_cast<int64_t>(p)) * kv_dim + g * hd + d];
        }
        sc[p] = s / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, sc[p]);
      }
      double tot = 0;
      for (double& s : sc) tot += (s = std::exp(s - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (size_t p = 0; p < sc.size(); ++p) o += sc[p] / tot * v_ref[(base + static_cast<int64_t>(p)) * kv_dim + g * hd + d];
        ref[static_cast<size_t>(i * q_dim + h * hd + d)] = static_cast<float>(o);
      }
    }
  }
  auto d_acc = poisoned(static_cast<size_t>(T * heads * splits * hd) * 4);
  auto d_ml = poisoned(static_cast<size_t>(T * heads * splits * 2) * 4);
  auto d_out = poisoned(static_cast<size_t>(T * q_dim) * dtype_size(t));
  cuda::AttentionArgs a;
  a.q = d_q.as<float>();
  a.n_tokens = T;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = hd;
  a.seq = d_seq.as<int32_t>();
  a.pos = d_pos.as<int32_t>();
  a.block_table = d_table.as<int32_t>();
  a.table_width = width;
  a.kv = kv;
  a.layer = layer;
  a.splits = splits;
  a.partial_acc = d_acc.as<float>();
  a.partial_ml = d_ml.as<float>();
  a.out = d_out.get();
  // Both block sizes of the partial kernel (0 picks one of them).
  for (int warps : {8, 16}) {
    cuda::attention(t, a, nullptr, warps);
    const double e = rel_error(download(d_out, ref.size(), t), ref);
    std::printf("[attention %s heads %lld/%lld hd %lld splits %lld warps %d] rel err %.3g\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(heads), static_cast<long long>(kv_heads),
                static_cast<long long>(hd), static_cast<long long>(splits), warps, e);
    EXPECT_LT(e, out_tolerance(t) + 1e-5);
    // Poison again so the second block size cannot pass on the first one's output.
    ASSERT_EQ(cudaMemset(d_out.get(), 0xff, static_cast<size_t>(T * q_dim) * dtype_size(t)), cudaSuccess);
  }
  fused_rope_decode_case(t, a, pool, num_pages * layers * 2 * pt * kv_dim, qkv, q_ref, ref, lens, pos, page, inv,
                         splits);

  // The tensor-core prefill kernels over query blocks of <= kPrefillQueryBlock tokens of one
  // sequence: one and two 16-row tiles per thread block, and a warp per query head. Their
  // probabilities are rounded to the cache dtype before P.V, hence twice the output tolerance;
  // they do the same products in the same order, so every kernel that serves the group gives the
  // row-tile kernel's output bit for bit.
  if (!cuda::prefill_attention_supported(t, hd, group)) return;
  std::vector<int32_t> qb_start, qb_len;
  for (int64_t i = 0; i < T; ++i) {
    if (!qb_len.empty() && seq[static_cast<size_t>(i)] == seq[static_cast<size_t>(i - 1)] &&
        qb_len.back() < cuda::kPrefillQueryBlock) {
      ++qb_len.back();
    } else {
      qb_start.push_back(static_cast<int32_t>(i));
      qb_len.push_back(1);
    }
  }
  auto d_qbs = upload(qb_start);
  auto d_qbl = upload(qb_len);
  auto d_out2 = poisoned(static_cast<size_t>(T * q_dim) * dtype_size(t));
  a.q_block_start = d_qbs.as<int32_t>();
  a.q_block_len = d_qbl.as<int32_t>();
  a.n_q_blocks = static_cast<int64_t>(qb_start.size());
  a.out = d_out2.get();
  const size_t out_bytes = static_cast<size_t>(T * q_dim) * dtype_size(t);
  std::vector<unsigned char> first_bits;
  const std::pair<cuda::PrefillKernel, const char*> kernels[] = {{cuda::PrefillKernel::row_tile, "row tile"},
                                                                 {cuda::PrefillKernel::row_tiles2, "row tiles 2"},
                                                                 {cuda::PrefillKernel::head_rows, "head rows"}};
  int smem = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  for (const auto& [kernel, name] : kernels) {
    // (The kernel plan does not pick a form whose shared memory the GPU lacks: head rows at
    // head_dim 128 on compute capability 8.6 / 8.9.)
    if (!cuda::prefill_kernel_serves(kernel, group) ||
        cuda::prefill_smem_bytes(kernel, hd, group) > static_cast<size_t>(smem)) {
      continue;
    }
    cuda::prefill_attention(t, a, nullptr, kernel);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double e2 = rel_error(download(d_out2, ref.size(), t), ref);
    std::printf("[prefill attention %s heads %lld/%lld hd %lld %s] rel err %.3g\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(heads), static_cast<long long>(kv_heads),
                static_cast<long long>(hd), name, e2);
    EXPECT_LT(e2, 2 * out_tolerance(t));
    std::vector<unsigned char> bits(out_bytes);
    ASSERT_EQ(cudaMemcpy(bits.data(), d_out2.get(), out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    if (first_bits.empty()) {
      first_bits = bits;
    } else {
      EXPECT_TRUE(bits == first_bits) << name << " differs from the row-tile kernel's output";
    }
    // Poison again so the next kernel cannot pass on this one's output.
    ASSERT_EQ(cudaMemset(d_out2.get(), 0xff, out_bytes), cudaSuccess);
  }
}

TEST_P(OpTest, RopeAndPagedAttention) {
  attention_case(GetParam(), 32, 8, 128, 1);
  attention_case(GetParam(), 32, 8, 128, 7);
  attention_case(GetParam(), 4, 2, 16, 1);
  attention_case(GetParam(), 4, 2, 16, 32);
  attention_case(GetParam(), 16, 2, 256, 5);  // group 8, the largest head: 4 warps per block
  attention_case(GetParam(), 4, 4, 64, 16);   // group 1
}

// RoPE + KV write from a qkv in the cache dtype (cuBLASLt's output) gives exactly what it gives
// from the same values in fp32: q, and every K and V element of the cache. So does a qkv in three
// fp32 parts (band_gemm_parts' outputs) against their sum, added in order on the host.
TEST_P(OpTest, RopeFromComputeDtypeEqualsFromF32) {
  const DType t = GetParam();
  if (t == DType::f32) GTEST_SKIP() << "the f32 input is the compute dtype";
  const int64_t heads = 4, kv_heads = 2, hd = 16, T = 5, pt = 4, layers = 1;
  const int64_t q_dim = heads * hd, kv_dim = kv_heads * hd;
  auto qkv = random_vector(static_cast<size_t>(T * (q_dim + 2 * kv_dim)), 31);
  const std::vector<std::byte> rounded = encode(qkv, t);  // qkv now holds the rounded values
  const std::vector<int32_t> pos = {0, 1, 2, 3, 9}, page = {0, 0, 0, 0, 1};
  std::vector<float> inv(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / hd);
  auto d_pos = upload(pos);
  auto d_page = upload(page);
  auto d_inv = upload(inv);
  const size_t pool_bytes = static_cast<size_t>(2 * layers * 2 * pt * kv_dim) * dtype_size(t);
  const std::vector<float> parts = random_vector(3 * qkv.size(), 32);
  std::vector<float> sum(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) sum[i] = (parts[i] + parts[qkv.size() + i]) + parts[2 * qkv.size() + i];
  std::vector<std::vector<float>> q(4);
  std::vector<std::vector<std::byte>> pools(4, std::vector<std::byte>(pool_bytes));
  for (int variant = 0; variant < 4; ++variant) {
    auto d_in = variant == 0 ? upload(qkv) : variant == 1 ? upload(rounded) : variant == 2 ? upload(parts) : upload(sum);
    cuda::DeviceBuffer pool = poisoned(pool_bytes);
    auto d_q = poisoned(static_cast<size_t>(T * q_dim) * 4);
    const cuda::KvLayout kv{pool.get(), layers, pt, kv_dim};
    cuda::rope_write_kv(t, variant == 1 ? t : DType::f32, d_in.get(), T, heads, kv_heads, hd, d_pos.as<int32_t>(),
                        d_page.as<int32_t>(), d_inv.as<float>(), kv, 0, d_q.as<float>(), nullptr, variant == 2 ? 3 : 1);
    q[static_cast<size_t>(variant)] = download(d_q, static_cast<size_t>(T * q_dim));
    ASSERT_EQ(cudaMemcpy(pools[static_cast<size_t>(variant)].data(), pool.get(), pool_bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  EXPECT_EQ(q[0], q[1]);
  EXPECT_EQ(pools[0], pools[1]);  // the unwritten slots hold the same poison
  EXPECT_EQ(q[2], q[3]);
  EXPECT_EQ(pools[2], pools[3]);
}

// The device argmax against sampler.h's host argmax: random rows, ties (lowest index wins),
// NaNs (never larger; a NaN at index 0 wins), all -inf, -0 against +0, a maximum in the last
// element, and a vocabulary that is not a multiple of 4 (the scalar loop); one block per row and
// clusters of 2 to 16 blocks.
TEST(Argmax, MatchesHostArgmax) {
  for (const int64_t vocab : {int64_t{128256}, int64_t{1001}}) {
    const int64_t rows = 9;
    std::vector<float> x = random_vector(static_cast<size_t>(rows * vocab), 21);
    auto row = [&](int64_t r) { return x.data() + r * vocab; };
    row(1)[17] = 50.0f;  // ties: the first of three
    row(1)[900] = 50.0f;
    row(1)[5] = 50.0f;
    row(2)[0] = NAN;  // NaN at 0 wins
    row(2)[3] = 99.0f;
    row(3)[7] = NAN;  // NaN elsewhere never wins
    row(3)[8] = 40.0f;
    std::fill(row(4), row(4) + vocab, -INFINITY);
    std::fill(row(5), row(5) + vocab, 0.0f);
    row(5)[0] = -1.0f;
    row(5)[1] = -0.0f;  // -0 == +0: the first of them
    row(6)[vocab - 1] = 1e30f;
    std::fill(row(7), row(7) + vocab, NAN);
    row(7)[0] = 1.0f;  // NaNs everywhere else: index 0
    for (int64_t i = 0; i < vocab; i += 3) row(8)[i] = 7.0f;  // many ties
    auto d_x = upload(x);
    int major = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    for (const int blocks : {1, 2, 4, 8, 16}) {
      if (blocks > 1 && major < 9) continue;  // clusters
      auto d_ids = poisoned(static_cast<size_t>(rows) * 4);
      cuda::argmax_rows(d_x.as<float>(), rows, vocab, d_ids.as<int32_t>(), blocks, nullptr);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      std::vector<int32_t> got(static_cast<size_t>(rows));
      ASSERT_EQ(cudaMemcpy(got.data(), d_ids.get(), got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(got[static_cast<size_t>(r)], argmax({row(r), static_cast<size_t>(vocab)}))
            << "row " << r << " vocab " << vocab << " blocks " << blocks;
      }
      EXPECT_EQ(got[1], 5);
      EXPECT_EQ(got[2], 0);
      EXPECT_EQ(got[8], 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpTest, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace kernelllm
