// fp8_gemm_stub for CUDA: out [m, n] = a [m, k] b [n, k]^T with both operands K-major, as one
// cuBLASLt call (lt_matmul.cu's fp8 path: device descales, float32 accumulation, "TN"). Written
// for Hopper; not yet run on a GPU (tests/cuda/test_amp_fp8.cpp checks it against the emulation).
#include "framework/ops/fp8_kernels.h"
#include "kernels/cuda/blas/lt_matmul.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {
namespace {

const float* float_ptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr; }

void fp8_gemm_cuda(const Fp8GemmArgs& g) {
  const int64_t m = g.a.size(0), k = g.a.size(1), n = g.b.size(0);
  blas::GemmProblem p;
  p.dtype = g.out.dtype();
  p.a_dtype = g.a.dtype();
  p.b_dtype = g.b.dtype();
  p.device = g.out.device().index;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {g.a.raw_data(), k, 1, 0};  // [m, k], K-major
  p.b = {g.b.raw_data(), 1, k, 0};  // [k, n] as the transpose of b [n, k]: K-major too
  p.d = g.out.raw_data();
  p.ldd = n;
  p.a_scale = float_ptr(g.a_scale);
  p.b_scale = float_ptr(g.b_scale);
  p.d_scale = float_ptr(g.d_scale);
  p.amax_d = g.amax_d.defined() ? static_cast<float*>(g.amax_d.raw_data()) : nullptr;
  p.fast_accum = g.fast_accum;
  blas::lt_matmul(p);
}

bool fp8_gemm_supported_cuda(int device) { return blas::lt_fp8_supported(device); }

}  // namespace

HG_REGISTER_KERNEL(fp8_gemm_stub, kCUDA, fp8_gemm_cuda);
HG_REGISTER_KERNEL(fp8_gemm_supported_stub, kCUDA, fp8_gemm_supported_cuda);

}  // namespace hg::cuda
