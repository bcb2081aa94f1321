// Per-op device timings at the Llama-3.1-8B shapes (CUDA events, median of 50 after warm-up,
// inputs rotated so the weights are not cache-resident): GEMV at n = 1, 2, 8 (the split-row kernel
// gemv() runs, next to the old warp-per-row kernel on the same line; then every layout at n = 1),
// the skinny tensor-core GEMM next to cuBLASLt at n = 2..32 (then every layout at n = 10, 20),
// the staged GEMM (one block per SM, both stage widths) next to cuBLASLt and the skinny GEMM at
// n = 8..32,
// cuBLASLt at n = 1, 20 and 1500, attention for decode (n = 1, 20 at 1,500 context) and prefill
// (1,500 tokens: the split kernel and each tensor-core prefill kernel), and decode attention of 20
// forks of one 1,500-token prompt: split kernel vs shared-prefix kernel (its own positions by the
// split kernel and on the tensor cores). Prints one line per op with time and achieved GB/s or
// TB/s (weights + KV bytes read). `kernelllm_cuda_ops_bench staged` runs the staged GEMM's lines
// only, `band` the band GEMM's (its chosen layout and each cluster size at n = 17, 20, 32, next to
// cuBLASLt and the staged GEMM), `forks` the 20 forks' attention (own positions by the split
// kernel and on the tensor cores), `prefill` the prefill attention's.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "event_timer.h"
#include "engine/cuda/attention.cuh"
#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/band_gemm.cuh"
#include "engine/cuda/common.cuh"
#include "engine/cuda/gemm.cuh"
#include "engine/cuda/gemv.cuh"
#include "engine/cuda/skinny_gemm.cuh"
#include "engine/cuda/staged_gemm.cuh"
#include "engine/cuda/swiglu.cuh"
#include "engine/cuda/init.cuh"

using namespace kernelllm;
using namespace kernelllm::cuda;

namespace {
float median_ms(const std::function<void(int)>& fn) { return kernelllm::bench::median_event_ms(fn); }
}  // namespace

int main(int argc, char** argv) {
  const bool staged_only = argc > 1 && std::strcmp(argv[1], "staged") == 0;
  const bool band_only = argc > 1 && std::strcmp(argv[1], "band") == 0;
  const bool forks_only = argc > 1 && std::strcmp(argv[1], "forks") == 0;
  const bool prefill_only = argc > 1 && std::strcmp(argv[1], "prefill") == 0;
  const DType t = DType::bf16;
  const int64_t h = 4096;
  Gemm gemm;
  if (!gemm.init(t).ok()) return 1;
  const int kCopies = 4;  // rotate among 4 weight copies (> 50 MB L2)
  struct Shape { const char* name; int64_t rows, cols; };
  const Shape shapes[] = {{"qkv", 6144, h}, {"o", h, h}, {"gate_up", 28672, h}, {"down", h, 14336}, {"lm_head", 128256, h}};
  DeviceBuffer x, y;
  (void)x.allocate(size_t{1500} * 14336 * 2, "x");
  (void)y.allocate(size_t{1500} * 128256 * 4, "y");
  fill_random(t, x.get(), 1500 * 14336, 7, 1.0f, nullptr);
  const int sms = current_sm_count();
  DeviceBuffer partials, counters;
  (void)partials.allocate(static_cast<size_t>(staged_partial_floats(sms)) * 4, "partials");
  (void)counters.allocate(static_cast<size_t>(staged_counter_count(128256)) * 4, "counters");
  cudaMemset(counters.get(), 0, static_cast<size_t>(staged_counter_count(128256)) * 4);
  const StagedScratch scratch{partials.as<float>(), counters.as<int32_t>(), sms};
  for (const Shape& s : shapes) {
    if (forks_only || prefill_only) break;
    std::vector<DeviceBuffer> w(kCopies);
    for (auto& b : w) {
      (void)b.allocate(static_cast<size_t>(s.rows * s.cols) * 2, "w");
      fill_random(t, b.get(), s.rows * s.cols, 3, 0.02f, nullptr);
    }
    const double gb = static_cast<double>(s.rows * s.cols) * 2 / 1e9;
    if (band_only) {
      for (int64_t n : {17, 20, 32}) {
        std::printf("band    %-8s n=%-4lld", s.name, static_cast<long long>(n));
        for (int cluster : {0, 1, 2, 4}) {
          const float ms = median_ms([&](int i) {
            (void)band_gemm({cluster, 0}, t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), DType::f32,
                            false, sms, nullptr);
          });
          const BandLayout l = band_layout({cluster, 0}, t, s.rows, s.cols, n, sms);
          std::printf(" | c%d (%dx%d, %d tiles) %6.1f us %4.2f TB/s", cluster, l.clusters, l.cluster, l.tiles, ms * 1e3,
                      gb / ms);
        }
        const float lt_ms = median_ms([&](int i) {
          (void)gemm.run(w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
        });
        const float st_ms = median_ms([&](int i) {
          (void)staged_gemm_with_config({}, t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), DType::f32,
                                        false, scratch, nullptr);
        });
        std::printf(" | cublasLt %6.1f us %4.2f TB/s | staged %6.1f us %4.2f TB/s\n", lt_ms * 1e3, gb / lt_ms,
                    st_ms * 1e3, gb / st_ms);
        if (std::strcmp(s.name, "gate_up") == 0) {
          // The activation as the backend makes it: SwiGLU in the band's epilogue, against the
          // band GEMM in bf16 and swiglu.cuh's kernel after it (y's second half holds the activation).
          const int64_t inter = s.rows / 2;
          void* act = static_cast<char*>(y.get()) + static_cast<size_t>(n * s.rows) * 2;
          const float fused_ms = median_ms([&](int i) {
            (void)band_gemm_swiglu({}, t, w[i % kCopies].get(), inter, s.cols, x.get(), n, act, sms, nullptr);
          });
          const float two_ms = median_ms([&](int i) {
            (void)band_gemm({}, t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), t, false, sms, nullptr);
            swiglu(t, t, y.get(), n, inter, act, nullptr);
          });
          std::printf("band    swiglu   n=%-4lld | fused %6.1f us %4.2f TB/s | band + swiglu %6.1f us\n",
                      static_cast<long long>(n), fused_ms * 1e3, gb / fused_ms, two_ms * 1e3);
        }
      }
      continue;
    }
    // The staged GEMM (both stage widths) beside cuBLASLt and the skinny GEMM.
    for (int64_t n : {8, 10, 16, 20, 32}) {
      float staged_ms[2];
      for (int k = 0; k < 2; ++k) {
        const StagedConfig c{k == 0 ? 128 : 256};
        staged_ms[k] = median_ms([&](int i) {
          (void)staged_gemm_with_config(c, t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), DType::f32,
                                        false, scratch, nullptr);
        });
      }
      const float lt_ms = median_ms([&](int i) {
        (void)gemm.run(w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
      });
      const float sk_ms = median_ms([&](int i) {
        skinny_gemm(t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), DType::f32, false, nullptr);
      });
      std::printf("staged  %-8s n=%-4lld 128 cols %8.1f us  %5.2f TB/s  | 256 cols %8.1f us  %5.2f TB/s"
                  "  | cublasLt %8.1f us  %5.2f TB/s  | skinny %8.1f us  %5.2f TB/s\n",
                  s.name, static_cast<long long>(n), staged_ms[0] * 1e3, gb / staged_ms[0], staged_ms[1] * 1e3,
                  gb / staged_ms[1], lt_ms * 1e3, gb / lt_ms, sk_ms * 1e3, gb / sk_ms);
    }
    if (staged_only) continue;
    const GemvConfig layout = gemv_config(t, s.rows, s.cols);
    for (int64_t n : {1, 2, 8}) {
      const float old_ms = median_ms([&](int i) {
        gemv_warp_per_row(t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
      });
      const float ms = median_ms([&](int i) {
        gemv(t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
      });
      std::printf("gemv    %-8s n=%-4lld %8.1f us  %5.2f TB/s  | warp-per-row %8.1f us  %5.2f TB/s"
                  "  | layout %d warps/row x %d rows/group\n",
                  s.name, static_cast<long long>(n), ms * 1e3, gb / ms, old_ms * 1e3, gb / old_ms,
                  layout.warps_per_row, layout.rows_per_group);
    }
    // Every layout of the split-row kernel at one token, for tuning gemv_config.
    for (int wpr : {1, 2, 4, 8}) {
      for (int rpg : {1, 2, 4}) {
        const float ms = median_ms([&](int i) {
          (void)gemv_with_config(GemvConfig{wpr, rpg}, t, w[i % kCopies].get(), s.rows, s.cols, x.get(), 1,
                                 y.as<float>(), nullptr);
        });
        std::printf("gemv-layout %-8s n=1    %d warps/row x %d rows/group %8.1f us  %5.2f TB/s\n", s.name, wpr, rpg,
                    ms * 1e3, gb / ms);
      }
    }
    // The skinny tensor-core GEMM beside cuBLASLt at the batch sizes of k-sample decoding, then
    // every layout at 10 and 20 tokens, for tuning skinny_config.
    const SkinnyConfig chosen = skinny_config(s.cols);
    for (int64_t n : {2, 4, 8, 10, 16, 20, 24, 32}) {
      const float ms = median_ms([&](int i) {
        skinny_gemm(t, w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.get(), DType::f32, false, nullptr);
      });
      const float lt_ms = median_ms([&](int i) {
        (void)gemm.run(w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
      });
      std::printf("skinny  %-8s n=%-4lld %8.1f us  %5.2f TB/s  | cublasLt %8.1f us  %5.2f TB/s"
                  "  | layout %d tiles/warp x %d k-warps %s\n",
                  s.name, static_cast<long long>(n), ms * 1e3, gb / ms, lt_ms * 1e3, gb / lt_ms, chosen.tiles_per_warp,
                  chosen.k_warps, chosen.dealt ? "dealt" : "spans");
    }
    for (int64_t n : {10, 20}) {
      for (int tiles : {1, 2, 4}) {
        for (int kw : {2, 4, 8}) {
          for (bool dealt : {true, false}) {
            if (tiles * kw > 16) continue;
            const float ms = median_ms([&](int i) {
              (void)skinny_gemm_with_config(SkinnyConfig{tiles, kw, dealt}, t, w[i % kCopies].get(), s.rows, s.cols,
                                            x.get(), n, y.get(), DType::f32, false, nullptr);
            });
            std::printf("skinny-layout %-8s n=%-4lld %d tiles/warp x %d k-warps %s %8.1f us  %5.2f TB/s\n", s.name,
                        static_cast<long long>(n), tiles, kw, dealt ? "dealt" : "spans", ms * 1e3, gb / ms);
          }
        }
      }
    }
    for (int64_t n : {1, 20, 1500}) {
      const float ms = median_ms([&](int i) {
        (void)gemm.run(w[i % kCopies].get(), s.rows, s.cols, x.get(), n, y.as<float>(), nullptr);
      });
      std::printf("cublasLt %-8s n=%-4lld %8.1f us  %6.0f GB/s  %6.0f TFLOP/s\n", s.name, static_cast<long long>(n),
                  ms * 1e3, gb / ms * 1e3, 2.0 * static_cast<double>(s.rows * s.cols * n) / ms / 1e9);
    }
  }
  if (staged_only || band_only) return 0;
  // Attention: 8 KV heads x 128, 32 query heads, one layer of a 2-layer pool, page 16.
  const int64_t pt = 16, ctx = 1500, kv_dim = 1024, layers = 2;
  for (int64_t n : forks_only     ? std::vector<int64_t>{}
                   : prefill_only ? std::vector<int64_t>{1500}
                                  : std::vector<int64_t>{1, 20, 1500}) {
    const bool prefill = n == 1500;
    const int64_t seqs = prefill ? 1 : n;
    const int64_t pages_per_seq = (ctx + pt - 1) / pt + 1;
    const int64_t width = pages_per_seq;
    DeviceBuffer pool, table, q, acc, ml, out, pos, seq;
    (void)pool.allocate(static_cast<size_t>(seqs * pages_per_seq * layers * 2 * pt * kv_dim) * 2, "pool");
    fill_random(t, pool.get(), seqs * pages_per_seq * layers * 2 * pt * kv_dim, 5, 1.0f, nullptr);
    std::vector<int32_t> tab(static_cast<size_t>(seqs * width)), ps(static_cast<size_t>(n)), sq(static_cast<size_t>(n));
    for (size_t i = 0; i < tab.size(); ++i) tab[i] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < n; ++i) {
      ps[static_cast<size_t>(i)] = static_cast<int32_t>(prefill ? i : ctx - 1);
      sq[static_cast<size_t>(i)] = static_cast<int32_t>(prefill ? 0 : i);
    }
    (void)table.allocate(tab.size() * 4, "t");
    (void)pos.allocate(ps.size() * 4, "p");
    (void)seq.allocate(sq.size() * 4, "s");
    cudaMemcpy(table.get(), tab.data(), tab.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(pos.get(), ps.data(), ps.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(seq.get(), sq.data(), sq.size() * 4, cudaMemcpyHostToDevice);
    // The 8B shape's attention over this pool, for the n tokens (q, out and scratch set by the caller).
    auto layer_args = [&] {
      AttentionArgs a;
      a.q = q.as<float>();
      a.n_tokens = n;
      a.heads = 32;
      a.kv_heads = 8;
      a.head_dim = 128;
      a.seq = seq.as<int32_t>();
      a.pos = pos.as<int32_t>();
      a.block_table = table.as<int32_t>();
      a.table_width = width;
      a.kv = KvLayout{pool.get(), layers, pt, kv_dim};
      a.layer = 1;
      return a;
    };
    for (int64_t splits : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{32}}) {
      if (prefill && splits > 1) break;
      (void)q.allocate(static_cast<size_t>(n * 4096) * 4, "q");
      fill_random(DType::f32, q.get(), n * 4096, 9, 1.0f, nullptr);
      (void)acc.allocate(static_cast<size_t>(n * 32 * splits * 128) * 4, "acc");
      (void)ml.allocate(static_cast<size_t>(n * 32 * splits * 2) * 4, "ml");
      (void)out.allocate(static_cast<size_t>(n * 4096) * 2, "out");
      AttentionArgs a = layer_args();
      a.splits = splits;
      a.partial_acc = acc.as<float>();
      a.partial_ml = ml.as<float>();
      a.out = out.get();
      const double gb = prefill ? static_cast<double>(ctx * kv_dim * 2 * 2) / 1e9
                                : static_cast<double>(n * ctx * kv_dim * 2 * 2) / 1e9;
      for (int warps : {8, 16}) {  // the partial kernel's block sizes
        const float ms = median_ms([&](int) { attention(t, a, nullptr, warps); });
        std::printf("attention n=%-4lld ctx=%lld splits=%-2lld warps %2d %8.1f us  %6.0f GB/s (KV bytes once)\n",
                    static_cast<long long>(n), static_cast<long long>(ctx), static_cast<long long>(splits), warps,
                    ms * 1e3, gb / ms * 1e3);
        if (prefill) break;
      }
    }
    if (prefill) {  // the tensor-core kernel the backend uses for prefill, both row tilings
      std::vector<int32_t> qb_start, qb_len;
      for (int64_t i = 0; i < n; i += kPrefillQueryBlock) {
        qb_start.push_back(static_cast<int32_t>(i));
        qb_len.push_back(static_cast<int32_t>(std::min(kPrefillQueryBlock, n - i)));
      }
      DeviceBuffer qbs, qbl;
      (void)qbs.allocate(qb_start.size() * 4, "qbs");
      (void)qbl.allocate(qb_len.size() * 4, "qbl");
      cudaMemcpy(qbs.get(), qb_start.data(), qb_start.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(qbl.get(), qb_len.data(), qb_len.size() * 4, cudaMemcpyHostToDevice);
      AttentionArgs a = layer_args();
      a.out = out.get();
      a.q_block_start = qbs.as<int32_t>();
      a.q_block_len = qbl.as<int32_t>();
      a.n_q_blocks = static_cast<int64_t>(qb_start.size());
      // Causal: 32 heads x sum over queries of (pos + 1) positions x 128 dims x 2 products x 2 flops.
      const double flop = 32.0 * (static_cast<double>(n) * static_cast<double>(n + 1) / 2) * 128 * 4;
      struct Form { PrefillKernel kernel; const char* name; };
      const Form forms[] = {{PrefillKernel::row_tile, "row tile"},
                            {PrefillKernel::row_tiles2, "row tiles 2"},
                            {PrefillKernel::head_rows, "head rows"}};
      for (const Form& f : forms) {
        const float ms = median_ms([&](int) { prefill_attention(t, a, nullptr, f.kernel); });
        std::printf("prefill attention (tensor cores) n=%lld %-12s %8.1f us  %6.0f TFLOP/s\n",
                    static_cast<long long>(n), f.name, ms * 1e3, flop / ms / 1e9);
      }
    }
  }
  if (prefill_only) return 0;
  // 20 forks of a 1,500-token prompt: pages 0..92 shared, the partial page and the generated
  // tokens private; the fork's token at 1,500 + gen. Split kernel (4 splits) vs shared prefix.
  for (int64_t gen : {int64_t{0}, int64_t{256}, int64_t{512}}) {
    const int64_t n = 20, full = ctx / pt, width = (ctx + gen) / pt + 1;
    const int64_t own = width - full, n_pages = full + n * own;
    DeviceBuffer pool, table, q, acc, ml, out, meta;
    (void)pool.allocate(static_cast<size_t>(n_pages * layers * 2 * pt * kv_dim) * 2, "pool");
    fill_random(t, pool.get(), n_pages * layers * 2 * pt * kv_dim, 5, 1.0f, nullptr);
    std::vector<std::vector<int32_t>> pages(static_cast<size_t>(n));
    std::vector<int32_t> tab, ps, sq;
    for (int64_t f = 0; f < n; ++f) {
      auto& pg = pages[static_cast<size_t>(f)];
      for (int64_t p = 0; p < width; ++p) pg.push_back(static_cast<int32_t>(p < full ? p : full + f * own + (p - full)));
      tab.insert(tab.end(), pg.begin(), pg.end());
      ps.push_back(static_cast<int32_t>(ctx + gen));
      sq.push_back(static_cast<int32_t>(f));
    }
    std::vector<const std::vector<int32_t>*> ptrs;
    for (const auto& pg : pages) ptrs.push_back(&pg);
    SharedPrefixPlan plan;
    plan_shared_prefix(ptrs, ps, sq, pt, 4, plan);
    const std::vector<int32_t>* fields[] = {&ps, &sq, &plan.ctx_begin, &plan.item_seq, &plan.item_prefix,
                                            &plan.item_first, &plan.item_count, &plan.members, &tab};
    (void)meta.allocate(static_cast<size_t>(8 * n) * 4 + tab.size() * 4, "meta");
    for (size_t f = 0; f < 8; ++f) {
      cudaMemcpy(meta.as<int32_t>() + f * static_cast<size_t>(n), fields[f]->data(), static_cast<size_t>(n) * 4,
                 cudaMemcpyHostToDevice);
    }
    cudaMemcpy(meta.as<int32_t>() + 8 * n, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice);
    const int64_t max_splits = 4 + 32;
    (void)q.allocate(static_cast<size_t>(n * 4096) * 4, "q");
    fill_random(DType::f32, q.get(), n * 4096, 9, 1.0f, nullptr);
    (void)acc.allocate(static_cast<size_t>(n * 32 * max_splits * 128) * 4, "acc");
    (void)ml.allocate(static_cast<size_t>(n * 32 * max_splits * 2) * 4, "ml");
    (void)out.allocate(static_cast<size_t>(n * 4096) * 2, "out");
    const int32_t* md = meta.as<int32_t>();
    AttentionArgs a;
    a.q = q.as<float>();
    a.n_tokens = n;
    a.heads = 32;
    a.kv_heads = 8;
    a.head_dim = 128;
    a.pos = md;
    a.seq = md + n;
    a.block_table = md + 8 * n;
    a.table_width = width;
    a.kv = KvLayout{pool.get(), layers, pt, kv_dim};
    a.layer = 1;
    a.splits = 4;
    a.partial_acc = acc.as<float>();
    a.partial_ml = ml.as<float>();
    a.out = out.get();
    const float ms_split = median_ms([&](int) { attention(t, a, nullptr); });
    SharedPrefixArgs sp;
    sp.item_seq = md + 3 * n;
    sp.item_prefix = md + 4 * n;
    sp.item_first = md + 5 * n;
    sp.item_count = md + 6 * n;
    sp.members = md + 7 * n;
    std::printf("attention forks=20 prompt=%lld gen=%-4lld split kernel (4 splits) %8.1f us (shared pages: %d)\n",
                static_cast<long long>(ctx), static_cast<long long>(gen), ms_split * 1e3, plan.shared ? 1 : 0);
    a.ctx_begin = md + 2 * n;
    for (const auto& [ss, pre] : std::vector<std::pair<int64_t, int64_t>>{{4, 16}, {2, 16}, {1, 16}, {4, 8}, {4, 32}}) {
      a.splits = ss + pre;
      for (const bool mma : {false, true}) {
        const float ms = median_ms([&](int) { shared_prefix_attention(t, a, sp, ss, pre, nullptr, mma); });
        std::printf("attention forks=20 prompt=%lld gen=%-4lld shared prefix (%lld + %-2lld splits, own positions %s) "
                    "%8.1f us",
                    static_cast<long long>(ctx), static_cast<long long>(gen), static_cast<long long>(ss),
                    static_cast<long long>(pre), mma ? "mma" : "split", ms * 1e3);
        if (pre == kSharedPrefixSplits && (ss == 4 || ss == 2)) {  // the parts
          const float ms_suffix = median_ms([&](int) {
            if (mma) {
              suffix_attention_mma(t, a, ss, nullptr);
            } else {
              attention_partial(t, a, ss, nullptr);
            }
          });
          const float ms_merge = median_ms([&](int) { attention_merge(t, a, nullptr); });
          std::printf(" = suffix %.1f + prefix ~%.1f + merge %.1f", ms_suffix * 1e3,
                      (ms - ms_suffix - ms_merge) * 1e3, ms_merge * 1e3);
        }
        std::printf("\n");
      }
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
