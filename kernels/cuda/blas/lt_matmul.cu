// The cuBLASLt GEMM wrapper. cuBLASLt is column-major; a row-major D [m, n] is a column-major
// D' [n, m], so D = A B is computed as D' = B' A' with the operands swapped: each row-major
// operand is read in place as a column-major matrix, transposed or not by an op flag.
// The heuristic is asked for several algorithms; one that cublasLtMatmul rejects as
// NOT_SUPPORTED is skipped for the next. A bias-gradient epilogue with no algorithm (cuBLASLt
// supports BGRAD only for some layouts and types) runs as a plain GEMM plus a column-sum kernel.
//
// fp8 (written for Hopper, not yet run on a GPU): the operand types differ from D's, the operand
// descales are device pointers (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER, as D's scale and the
// amax of D), so no scale is read on the host. cuBLAS's documentation (cublasLtMatmul, its table of
// FP8 type combinations) lists A/B as E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (never E5M2 x E5M2)
// with float32 compute and scale types, C/D in bfloat16, float16 or float32 (or an fp8 D with a
// 16-bit C), and says fp8 needs "TN": A transposed and B not (both operands K-major) on Hopper.
// Transformer Engine's HYBRID backward multiplies E5M2 gradients by E4M3 operands, which that
// table allows.
#include "kernels/cuda/blas/lt_matmul.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "framework/cuda.h"
#include "kernels/common/blas_layout.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda::blas {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr int kMaxDevices = 64;
constexpr int kAlgorithms = 4;  // heuristic results kept per plan, tried in order

// A column-major view of one operand: rows x cols with leading dimension ld, maybe transposed.
struct ColView {
  int64_t rows = 0, cols = 0, ld = 0;
  bool trans = false;
};

// A row-major [rows, cols] matrix with strides (rs, cs) read as column-major op(X) of shape
// [cols, rows] (what the swapped problem needs: X^T).
ColView col_view_of_transpose(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const BlasLayout l = blas_layout(rows, cols, rs, cs);
  // Dense rows: memory is column-major [cols, rows] with ld, which is X^T itself.
  // Dense columns: memory is column-major [rows, cols] with ld, i.e. X; transpose.
  return l.transposed ? ColView{rows, cols, l.ld, true} : ColView{cols, rows, l.ld, false};
}

uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

struct PlanKey {
  int device;
  Dtype dtype, a_dtype, b_dtype;  // D (and C, bias); row-major A and B
  bool tf32;
  bool fast_accum;
  bool a_scale, b_scale, d_scale, amax_d;  // which fp8 scale pointers are set
  Epilogue epilogue;
  int64_t batch, m, n, k;
  int64_t lda, ldb, ldd, stride_a, stride_b, stride_d;
  bool trans_a, trans_b;
  uint32_t align_a, align_b, align_d, align_bias;
  auto tie() const {
    return std::tie(device, dtype, a_dtype, b_dtype, tf32, fast_accum, a_scale, b_scale, d_scale, amax_d, epilogue,
                    batch, m, n, k, lda, ldb, ldd, stride_a, stride_b, stride_d, trans_a, trans_b, align_a, align_b,
                    align_d, align_bias);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  // Best first; one that cublasLtMatmul rejects is dropped. (A fixed array: nvcc 13.0's front
  // end fails with an internal error on std::vector of this type.)
  std::array<cublasLtMatmulHeuristicResult_t, kAlgorithms> algos{};
  int algo_count = 0;
  bool bias_grad_by_kernel = false;  // BGRAD epilogue replaced by column_sum
  void destroy() {
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(d);
  }
};

struct DeviceBlas {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
};

// Plans, handles and workspaces live for the process: they are small, and destroying them at
// exit could run after the CUDA context is gone.
struct State {
  std::mutex mutex;
  std::map<PlanKey, Plan> plans;
  std::unordered_map<cudaStream_t, void*> workspaces;
  std::array<DeviceBlas, kMaxDevices> devices;
  LtCacheStats stats;
};
State& state() {
  static auto* s = new State();
  return *s;
}

cublasLtHandle_t handle_for(int device) {
  DeviceBlas& d = state().devices[static_cast<size_t>(device)];
  std::call_once(d.once, [&] {
    DeviceGuard guard(device);
    HG_CUBLAS_CHECK(cublasLtCreate(&d.handle));
  });
  return d.handle;
}

void* workspace_for(cudaStream_t stream, int device) {  // caller holds the state mutex
  auto& ws = state().workspaces[stream];
  if (!ws) {
    DeviceGuard guard(device);
    HG_CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
  }
  return ws;
}

cudaDataType_t data_type(Dtype d) {
  switch (d) {
    case kFloat32: return CUDA_R_32F;
    case kFloat16: return CUDA_R_16F;
    case kBFloat16: return CUDA_R_16BF;
    case kFloat64: return CUDA_R_64F;
    case kFloat8E4M3: return CUDA_R_8F_E4M3;
    case kFloat8E5M2: return CUDA_R_8F_E5M2;
    default: fail("mm", "cuBLASLt GEMM does not support {}", d);
  }
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::BiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::Gelu: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::BiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    // Row-major A is the swapped problem's B operand, and the other way round.
    case Epilogue::BiasGradA: return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::BiasGradB: return CUBLASLT_EPILOGUE_BGRADA;
    case Epilogue::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::DGeluBGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_bias_pointer(Epilogue e) { return e != Epilogue::None && e != Epilogue::Relu && e != Epilogue::Gelu; }
bool is_bias_grad(Epilogue e) { return e == Epilogue::BiasGradA || e == Epilogue::BiasGradB; }
bool uses_aux(Epilogue e) { return e == Epilogue::GeluAuxBias || e == Epilogue::DGeluBGrad; }

Dtype a_type(const GemmProblem& p) { return p.a_dtype.value_or(p.dtype); }
Dtype b_type(const GemmProblem& p) { return p.b_dtype.value_or(p.dtype); }
bool is_fp8_problem(const GemmProblem& p) { return is_float8(a_type(p)) || is_float8(b_type(p)); }

// The fp8 pointers of the swapped problem: cuBLASLt's A is row-major B and the other way round.
// Set at plan creation and again per call (the cached descriptor holds the previous call's).
void set_fp8_pointers(cublasLtMatmulDesc_t desc, const GemmProblem& p) {
  const std::array<std::pair<cublasLtMatmulDescAttributes_t, const void*>, 4> ptrs = {{
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.b_scale},
      {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.a_scale},
      {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, p.d_scale},
      {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, p.amax_d},
  }};
  for (const auto& [attr, ptr] : ptrs)
    if (ptr) HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &ptr, sizeof(ptr)));
}

// The aux matrix of the swapped (column-major) problem: D^T's shape, so its leading dimension is
// the row-major row stride. Set at plan creation and again per call (the cached descriptor holds
// the previous call's pointer).
void set_aux(cublasLtMatmulDesc_t desc, const GemmProblem& p) {
  HG_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
  HG_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.aux_ld, sizeof(p.aux_ld)));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, const ColView& v, int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  HG_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(v.rows), static_cast<uint64_t>(v.cols), v.ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    HG_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    HG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                     sizeof(batch_stride)));
  }
  return layout;
}

std::string describe(const GemmProblem& p) {
  const std::string types =
      is_fp8_problem(p) ? fmt::format("{} x {} -> {}", a_type(p), b_type(p), p.dtype) : fmt::format("{}", p.dtype);
  return fmt::format("{} batch {} [{}, {}] x [{}, {}] (A strides {}, {}; B strides {}, {}), epilogue {}", types,
                     p.batch, p.m, p.k, p.k, p.n, p.a.row_stride, p.a.col_stride, p.b.row_stride, p.b.col_stride,
                     static_cast<int>(p.epilogue));
}

// `plain_bias_grad`: build the plan for a BGRAD epilogue without it (bias_grad_by_kernel).
Plan make_plan(const PlanKey& key, const GemmProblem& p, const ColView& va, const ColView& vb, bool plain_bias_grad) {
  const cudaDataType_t type = data_type(p.dtype);
  // An fp8 D takes a 16-bit C (the FP8 table's rows); C is never read (beta is 0).
  const cudaDataType_t c_type = is_float8(p.dtype) ? CUDA_R_16BF : type;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (p.dtype == kFloat64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if (p.dtype == kFloat32 && key.tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  Plan plan;
  plan.bias_grad_by_kernel = plain_bias_grad;
  const Epilogue fused = plain_bias_grad ? Epilogue::None : p.epilogue;
  HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, scale));
  // Swapped problem: first operand is row-major B (va), second is row-major A (vb).
  const cublasOperation_t op_first = va.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = vb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  HG_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  const cublasLtEpilogue_t epi = lt_epilogue(fused);
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (uses_bias_pointer(fused)) {
    const void* bias = p.bias ? p.bias : p.bias_grad;
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (uses_aux(fused)) set_aux(plan.desc, p);
  if (is_fp8_problem(p)) {
    const int8_t fast = key.fast_accum ? 1 : 0;
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    set_fp8_pointers(plan.desc, p);
  }
  plan.a = make_layout(data_type(b_type(p)), va, p.batch, p.b.batch_stride);
  plan.b = make_layout(data_type(a_type(p)), vb, p.batch, p.a.batch_stride);
  plan.c = make_layout(c_type, ColView{p.n, p.m, p.ldd, false}, p.batch, p.d_batch_stride);
  plan.d = make_layout(type, ColView{p.n, p.m, p.ldd, false}, p.batch, p.d_batch_stride);

  cublasLtMatmulPreference_t pref = nullptr;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  HG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Pointers of views may be less aligned than cuBLASLt's default assumption (256 bytes).
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> aligns = {{
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d},
  }};
  for (const auto& [attr, value] : aligns)
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  std::array<cublasLtMatmulHeuristicResult_t, kAlgorithms> results{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_for(p.device), plan.desc, plan.a, plan.b, plan.c,
                                                           plan.d, pref, kAlgorithms, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    plan.destroy();
    if (is_bias_grad(p.epilogue) && !plain_bias_grad) return make_plan(key, p, va, vb, true);
    fail("mm", "cuBLASLt has no algorithm for {} ({})", describe(p),
         st == CUBLAS_STATUS_SUCCESS ? "no heuristic result" : cublasLtGetStatusString(st));
  }
  std::copy(results.begin(), results.begin() + found, plan.algos.begin());
  plan.algo_count = found;
  return plan;
}

// Runs the plan's algorithms in order until one is accepted; one rejected with NOT_SUPPORTED
// (the heuristic's pick can still be refused for this problem) is dropped from the plan.
// Returns false when every algorithm was rejected.
bool run_plan(Plan& plan, const GemmProblem& p, cudaStream_t stream, void* ws) {
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = p.dtype == kFloat64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = p.dtype == kFloat64 ? static_cast<const void*>(&beta_d) : &beta_f;
  while (plan.algo_count > 0) {
    const cublasLtMatmulHeuristicResult_t& r = plan.algos[0];
    const cublasStatus_t st = cublasLtMatmul(handle_for(p.device), plan.desc, alpha, p.b.data, plan.a, p.a.data, plan.b,
                                             beta, p.d, plan.c, p.d, plan.d, &r.algo, ws, r.workspaceSize, stream);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
      HG_CUBLAS_CHECK(st);
      return true;
    }
    std::copy(plan.algos.begin() + 1, plan.algos.begin() + plan.algo_count, plan.algos.begin());
    --plan.algo_count;
  }
  return false;
}

// What cuBLASLt's fp8 GEMMs take (see the top of this file), checked here so that a wrong call
// names its problem instead of failing in the heuristic with NOT_SUPPORTED.
void check_fp8_problem(const GemmProblem& p, const ColView& va, const ColView& vb) {
  const Dtype at = a_type(p), bt = b_type(p);
  HG_CHECK(is_float8(at) && is_float8(bt), "fp8_gemm", "both operands must be fp8, got {}", describe(p));
  HG_CHECK(!(at == kFloat8E5M2 && bt == kFloat8E5M2), "fp8_gemm",
           "cuBLASLt has no E5M2 x E5M2 GEMM (one operand must be E4M3): {}", describe(p));
  HG_CHECK(is_float8(p.dtype) || p.dtype == kBFloat16 || p.dtype == kFloat16 || p.dtype == kFloat32, "fp8_gemm",
           "the output must be float32, bfloat16, float16 or fp8: {}", describe(p));
  HG_CHECK(!p.d_scale || is_float8(p.dtype), "fp8_gemm", "d_scale is for an fp8 output: {}", describe(p));
  HG_CHECK(p.epilogue == Epilogue::None, "fp8_gemm", "fp8 GEMMs take no epilogue here: {}", describe(p));
  // Swapped problem: cuBLASLt's A is row-major B read as [n, k] K-major (transposed), its B is
  // row-major A read as [k, m] (not transposed).
  HG_CHECK(va.trans && !vb.trans, "fp8_gemm",
           "fp8 operands must both be K-major (A [m, k] with unit column stride, B [k, n] with unit row stride: "
           "cuBLASLt's TN layout): {}",
           describe(p));
  HG_CHECK(p.k % 16 == 0 && va.ld % 16 == 0 && vb.ld % 16 == 0, "fp8_gemm",
           "k and the operands' leading dimensions must be multiples of 16: {}", describe(p));
  HG_CHECK(lt_fp8_supported(p.device), "fp8_gemm", "fp8 GEMMs need compute capability 8.9 or later; device {} is {}.{}",
           p.device, device_properties(p.device).major, device_properties(p.device).minor);
}

}  // namespace

bool lt_layout_ok(int64_t rows, int64_t cols, int64_t rs, int64_t cs) { return blas_layout(rows, cols, rs, cs).usable; }

bool lt_fp8_supported(int device) {
  const cudaDeviceProp& props = device_properties(device);
  return props.major > 8 || (props.major == 8 && props.minor >= 9);
}

void lt_matmul(const GemmProblem& p) {
  HG_CHECK(
      lt_layout_ok(p.m, p.k, p.a.row_stride, p.a.col_stride) && lt_layout_ok(p.k, p.n, p.b.row_stride, p.b.col_stride),
      "mm", "operand strides not supported by cuBLASLt: {}", describe(p));
  HG_CHECK(p.batch <= INT32_MAX, "mm", "batch {} is larger than cuBLASLt supports", p.batch);
  HG_CHECK(p.k > 0 && p.m > 0 && p.n > 0, "mm", "empty GEMM reached cuBLASLt: {}", describe(p));
  HG_CHECK(!uses_bias_pointer(p.epilogue) || p.bias || p.bias_grad, "mm", "epilogue {} needs a bias pointer",
           static_cast<int>(p.epilogue));
  // cuBLASLt's bias-gradient vector has no batch stride: every batch would write one vector.
  HG_CHECK(!uses_aux(p.epilogue) || (p.aux && p.aux_ld >= p.n && p.aux_ld % 8 == 0 && p.batch == 1), "mm",
           "the GELU epilogues take a single GEMM and an aux matrix with a row stride that is a multiple of 8 "
           "elements, got {} (aux row stride {})",
           describe(p), p.aux_ld);
  HG_CHECK(!is_bias_grad(p.epilogue) || p.batch == 1, "mm",
           "the bias-gradient epilogue takes a single GEMM, got batch {}: {}", p.batch, describe(p));
  const ColView va = col_view_of_transpose(p.k, p.n, p.b.row_stride, p.b.col_stride);  // B^T [n, k]
  const ColView vb = col_view_of_transpose(p.m, p.k, p.a.row_stride, p.a.col_stride);  // A^T [k, m]
  if (is_fp8_problem(p)) {
    check_fp8_problem(p, va, vb);
  } else {
    HG_CHECK(!is_float8(p.dtype) && !p.a_scale && !p.b_scale && !p.d_scale && !p.amax_d && !p.fast_accum, "mm",
             "fp8 scales, amax and fast accumulation need fp8 operands: {}", describe(p));
  }
  const void* bias = p.bias ? p.bias : p.bias_grad;
  const PlanKey key{p.device,
                    p.dtype,
                    a_type(p),
                    b_type(p),
                    p.dtype == kFloat32 && allow_tf32() && !is_fp8_problem(p),
                    p.fast_accum,
                    p.a_scale != nullptr,
                    p.b_scale != nullptr,
                    p.d_scale != nullptr,
                    p.amax_d != nullptr,
                    p.epilogue,
                    p.batch,
                    p.m,
                    p.n,
                    p.k,
                    va.ld,
                    vb.ld,
                    p.ldd,
                    p.b.batch_stride,
                    p.a.batch_stride,
                    p.d_batch_stride,
                    va.trans,
                    vb.trans,
                    alignment_of(p.a.data),
                    alignment_of(p.b.data),
                    alignment_of(p.d),
                    bias ? alignment_of(bias) : 256u};
  DeviceGuard guard(p.device);
  cudaStream_t stream = current_stream(p.device);
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    it = s.plans.emplace(key, make_plan(key, p, va, vb, false)).first;
    ++s.stats.plans;
  } else {
    ++s.stats.hits;
  }
  Plan& plan = it->second;
  if (uses_bias_pointer(p.epilogue) && !plan.bias_grad_by_kernel) {
    // The cached descriptor holds the previous call's pointer.
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (uses_aux(p.epilogue)) set_aux(plan.desc, p);
  if (is_fp8_problem(p)) set_fp8_pointers(plan.desc, p);
  void* ws = workspace_for(stream, p.device);
  if (!run_plan(plan, p, stream, ws)) {
    if (!is_bias_grad(p.epilogue) || plan.bias_grad_by_kernel)
      fail("mm", "cuBLASLt rejected every algorithm its heuristic offered for {}", describe(p));
    plan.destroy();
    plan = make_plan(key, p, va, vb, true);
    if (!run_plan(plan, p, stream, ws))
      fail("mm", "cuBLASLt rejected every algorithm its heuristic offered for {}", describe(p));
  }
  if (plan.bias_grad_by_kernel) {
    if (p.epilogue == Epilogue::BiasGradA) {  // sum over k of A [m, k]: m columns of length k
      column_sum(p.dtype, p.a.data, p.k, p.m, p.a.col_stride, p.a.row_stride, p.dtype, p.bias_grad, p.device);
    } else {  // sum over k of B [k, n]
      column_sum(p.dtype, p.b.data, p.k, p.n, p.b.row_stride, p.b.col_stride, p.dtype, p.bias_grad, p.device);
    }
  }
}

LtCacheStats lt_cache_stats() {
  std::lock_guard lock(state().mutex);
  return state().stats;
}

}  // namespace hg::cuda::blas
