// Shared-prefix decode attention; see attention_shared.cuh. The prefix kernel: a block per
// (prefix split, KV head) taking the items in turn, the work itself in attention_prefix.cuh.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_prefix.cuh"
#include "engine/cuda/attention_shared.cuh"
#include "engine/cuda/device_types.cuh"
#include "engine/cuda/launch.cuh"
#include "engine/cuda/mma.cuh"

namespace kernelllm::cuda {
namespace {

constexpr int64_t kSharedItemBlocks = 2;  // blocks per (split, KV head), each taking every 2nd item

// Grid: (prefix split, KV head, item stride); a block takes items blockIdx.z, + gridDim.z, ...
// up to the first unused one, so the grid stays small and fixed while the plan changes.
template <class T, int HD>
__global__ void __launch_bounds__(kPrefixThreads) prefix_kernel(AttentionArgs a, SharedPrefixArgs s, int suffix_splits) {
  prefix_unit<T, HD>(a, s, suffix_splits, blockIdx.x, static_cast<int>(gridDim.x), blockIdx.y, blockIdx.z, gridDim.z,
                     [] { wait_for_predecessor(); });
}

template <class T>
void launch_prefix(const AttentionArgs& a, const SharedPrefixArgs& s, int64_t suffix_splits, int64_t prefix_splits,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(prefix_splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(std::min(kSharedItemBlocks, a.n_tokens)));
  const int ss = static_cast<int>(suffix_splits);
  switch (a.head_dim) {
    case 16: launch_kernel(prefix_kernel<T, 16>, grid, kPrefixThreads, 0, stream, a, s, ss); break;
    case 32: launch_kernel(prefix_kernel<T, 32>, grid, kPrefixThreads, 0, stream, a, s, ss); break;
    case 64: launch_kernel(prefix_kernel<T, 64>, grid, kPrefixThreads, 0, stream, a, s, ss); break;
    default: launch_kernel(prefix_kernel<T, 128>, grid, kPrefixThreads, 0, stream, a, s, ss); break;
  }
}

}  // namespace

void plan_shared_prefix(const std::vector<const std::vector<int32_t>*>& pages, const std::vector<int32_t>& pos,
                        const std::vector<int32_t>& seq, int64_t page_tokens, int64_t group, SharedPrefixPlan& plan) {
  const size_t n = pos.size();
  plan.ctx_begin.assign(n, 0);
  plan.item_seq.assign(n, 0);
  plan.item_prefix.assign(n, 0);
  plan.item_first.assign(n, 0);
  plan.item_count.assign(n, 0);
  plan.members.clear();
  plan.shared = false;
  const auto max_members = static_cast<size_t>(std::max<int64_t>(1, kSharedRows / group));
  std::vector<bool> done(n, false);
  size_t items = 0;
  auto add_item = [&](const std::vector<size_t>& toks, size_t from, size_t cnt, int64_t prefix) {
    plan.item_seq[items] = seq[toks[from]];
    plan.item_prefix[items] = static_cast<int32_t>(prefix);
    plan.item_first[items] = static_cast<int32_t>(plan.members.size());
    plan.item_count[items] = static_cast<int32_t>(cnt);
    for (size_t k = from; k < from + cnt; ++k) {
      plan.members.push_back(static_cast<int32_t>(toks[k]));
      plan.ctx_begin[toks[k]] = static_cast<int32_t>(prefix);
      done[toks[k]] = true;
    }
    plan.shared = plan.shared || (cnt >= 2 && prefix > 0);
    ++items;
  };
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    const std::vector<int32_t>& pi = *pages[i];
    std::vector<size_t> toks = {i};
    // Only pages before the page of pos are complete for every member (a shared page is
    // never written after the fork; the page of pos was made private by extend()).
    int64_t common = pos[i] / page_tokens;
    if (common > 0) {
      for (size_t j = i + 1; j < n; ++j) {
        if (!done[j] && pos[j] / page_tokens > 0 && (*pages[j])[0] == pi[0]) toks.push_back(j);
      }
    }
    for (size_t k = 1; k < toks.size(); ++k) {
      const std::vector<int32_t>& pj = *pages[toks[k]];
      common = std::min<int64_t>(common, pos[toks[k]] / page_tokens);
      int64_t c = 0;
      while (c < common && pj[static_cast<size_t>(c)] == pi[static_cast<size_t>(c)]) ++c;
      common = c;
    }
    if (toks.size() < 2 || common == 0) {
      add_item({i}, 0, 1, 0);
      continue;
    }
    for (size_t from = 0; from < toks.size(); from += max_members) {
      add_item(toks, from, std::min(max_members, toks.size() - from), common * page_tokens);
    }
  }
}

bool shared_prefix_supported(DType type, int64_t head_dim, int64_t group) {
  return (type == DType::bf16 || type == DType::f16) &&
         (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8;
}

void shared_prefix_own(DType type, const AttentionArgs& args, int64_t suffix_splits, cudaStream_t stream,
                       bool mma_suffix) {
  if (args.n_tokens == 0) return;
  if (mma_suffix && suffix_mma_supported(type, args.head_dim, args.heads / args.kv_heads)) {
    suffix_attention_mma(type, args, suffix_splits, stream);
  } else {
    attention_partial(type, args, suffix_splits, stream);
  }
}

void shared_prefix_attention(DType type, const AttentionArgs& args, const SharedPrefixArgs& shared,
                             int64_t suffix_splits, int64_t prefix_splits, cudaStream_t stream, bool mma_suffix) {
  if (args.n_tokens == 0) return;
  shared_prefix_own(type, args, suffix_splits, stream, mma_suffix);
  if (type == DType::f16) {
    launch_prefix<__half>(args, shared, suffix_splits, prefix_splits, stream);
  } else {
    launch_prefix<__nv_bfloat16>(args, shared, suffix_splits, prefix_splits, stream);
  }
  attention_merge(type, args, stream);
}

}  // namespace kernelllm::cuda
