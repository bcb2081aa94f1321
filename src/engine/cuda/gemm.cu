// cuBLASLt projections; see gemm.cuh. Row-major W [rows, cols] is column-major [cols, rows],
// so Y^T (column-major [rows, n]) = op_T(W) . X^T: the "TN" layout cuBLASLt serves best.
#include <cublasLt.h>

#include <string>

#include "engine/cuda/gemm.cuh"

namespace kernelllm::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Status lt_status(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok_status();
  return error(ErrorCode::internal, "cuBLASLt: " + what + " failed with status " + std::to_string(static_cast<int>(s)));
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Candidates further down cuBLASLt's heuristic list that beat its first choice in the k = 20
// decode pass of Llama-3.1-8B on the H100 (6.61-6.68 against 6.75-6.78 ms a step; measured at 20
// tokens, applied to 17..24): qkv on 128x16 tiles instead of 64x24, and down on 64x16 tiles
// without split-K instead of 64x24 tiles split in two plus a reduction kernel.
struct Tuned {
  int64_t rows, cols, min_n, max_n;
  int tile, splitk;
};
constexpr Tuned kTuned[] = {
    {6144, 4096, 17, 24, CUBLASLT_MATMUL_TILE_128x16, 1},
    {4096, 14336, 17, 24, CUBLASLT_MATMUL_TILE_64x16, 1},
};

// The kTuned entry for this shape and token count, or nullptr.
const Tuned* tuned_for(int64_t rows, int64_t cols, int64_t n) {
  for (const Tuned& t : kTuned) {
    if (t.rows == rows && t.cols == cols && n >= t.min_n && n <= t.max_n) return &t;
  }
  return nullptr;
}

// The index of the first of `found` candidates with `want`'s tile and split-K, or 0 (the
// heuristic's first choice).
int tuned_choice(const cublasLtMatmulHeuristicResult_t* results, int found, const Tuned& want) {
  for (int i = 0; i < found; ++i) {
    int tile = 0, splitk = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                             &written) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof(splitk), &written) == CUBLAS_STATUS_SUCCESS &&
        tile == want.tile && splitk == want.splitk) {
      return i;
    }
  }
  return 0;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

Gemm::Gemm() = default;

Gemm::~Gemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

Status Gemm::init(DType type, bool tuned) {
  type_ = type;
  tuned_ = tuned;
  cublasLtHandle_t h = nullptr;
  KLLM_RETURN_IF_ERROR(lt_status(cublasLtCreate(&h), "create"));
  handle_ = h;
  return workspace_.allocate(kWorkspaceBytes, "cuBLASLt workspace");
}

Result<Gemm::Plan*> Gemm::plan(int64_t rows, int64_t cols, int64_t n, DType y_type) {
  const auto key = std::make_tuple(rows, cols, n, y_type);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto p = std::make_unique<Plan>();
  const cudaDataType_t dt = data_type(type_);
  KLLM_RETURN_IF_ERROR(lt_status(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t trans = CUBLAS_OP_T, no = CUBLAS_OP_N;
  KLLM_RETURN_IF_ERROR(lt_status(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "transa"));
  KLLM_RETURN_IF_ERROR(
      lt_status(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof(no)), "transb"));
  const auto r = static_cast<uint64_t>(rows), k = static_cast<uint64_t>(cols), m = static_cast<uint64_t>(n);
  KLLM_RETURN_IF_ERROR(lt_status(cublasLtMatrixLayoutCreate(&p->a, dt, k, r, static_cast<int64_t>(k)), "layout A"));
  KLLM_RETURN_IF_ERROR(lt_status(cublasLtMatrixLayoutCreate(&p->b, dt, k, m, static_cast<int64_t>(k)), "layout B"));
  KLLM_RETURN_IF_ERROR(
      lt_status(cublasLtMatrixLayoutCreate(&p->c, data_type(y_type), r, m, static_cast<int64_t>(r)), "layout C"));
  cublasLtMatmulPreference_t pref = nullptr;
  KLLM_RETURN_IF_ERROR(lt_status(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  const uint64_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // The heuristic's first candidate, or where a kTuned entry applies, up to 16 to look for its own among.
  const Tuned* want = tuned_ ? tuned_for(rows, cols, n) : nullptr;
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c, pref,
                                     want != nullptr ? kCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  KLLM_RETURN_IF_ERROR(lt_status(s, "heuristic"));
  if (found == 0) {
    return error(ErrorCode::unsupported, "cuBLASLt: no algorithm for [" + std::to_string(n) + " x " +
                                             std::to_string(cols) + "] . [" + std::to_string(rows) + " x " +
                                             std::to_string(cols) + "]^T");
  }
  p->algo = results[want != nullptr ? tuned_choice(results, found, *want) : 0].algo;
  Plan* raw = p.get();
  plans_.emplace(key, std::move(p));
  return raw;
}

Status Gemm::run(const void* w, int64_t rows, int64_t cols, const void* x, int64_t n, float* y, cudaStream_t stream) {
  return run(w, rows, cols, x, n, y, DType::f32, stream);
}

Status Gemm::run(const void* w, int64_t rows, int64_t cols, const void* x, int64_t n, void* y, DType y_type,
                 cudaStream_t stream, bool accumulate) {
  if (n == 0) return Status::ok_status();
  if (y_type != DType::f32 && y_type != type_) {
    return error(ErrorCode::invalid_argument, "cuBLASLt: expected an f32 output or the weights' dtype, found " +
                                                  std::string(dtype_name(y_type)));
  }
  KLLM_ASSIGN_OR_RETURN(Plan * p, plan(rows, cols, n, y_type));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // C is D: in place
  return lt_status(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p->op, &alpha, w, p->a, x, p->b, &beta, y,
                                  p->c, y, p->c, &p->algo, workspace_.get(), kWorkspaceBytes, stream),
                   "matmul");
}

}  // namespace kernelllm::cuda
