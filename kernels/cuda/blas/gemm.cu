// gemm_stub for CUDA: batched [B,M,K] x [B,K,N] through cuBLASLt, reading transposed views in
// place (an operand with neither inner stride 1 is first copied to a contiguous buffer), and the
// GEMMs with an epilogue: linear's bias (forward) and bias gradient (backward), and
// linear_gelu_linear's GELU (forward) and GELU gradient with its bias gradient (backward).
#include <cstdio>
#include <mutex>

#include "framework/dispatch.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/linear_fused_kernels.h"
#include "framework/ops/matmul_kernels.h"
#include "kernels/cuda/blas/lt_matmul.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {
namespace {

// The operand itself when cuBLASLt can read it, else a contiguous copy (queued on the stream).
Tensor readable(const Tensor& t) {
  if (blas::lt_layout_ok(t.shape()[1], t.shape()[2], t.strides()[1], t.strides()[2])) return t;
  Tensor c = empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  copy_stub(kCUDA, c, t);
  return c;
}

// A [1, rows, cols] alias of a 2-d tensor.
Tensor as_batch(const Tensor& t) {
  return Tensor(t.storage(), {1, t.shape()[0], t.shape()[1]}, {0, t.strides()[0], t.strides()[1]}, t.offset(),
                t.dtype());
}

blas::MatrixArg matrix_arg(const Tensor& t) {
  return {t.raw_data(), t.strides()[1], t.strides()[2], t.shape()[0] > 1 ? t.strides()[0] : 0};
}

// The problem out [batch, m, n] (contiguous) = a b, for readable 3-d operands.
blas::GemmProblem problem_for(const Tensor& out, const Tensor& a, const Tensor& b, int64_t m, int64_t n, int64_t k) {
  blas::GemmProblem p;
  p.dtype = out.dtype();
  p.device = out.device().index;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = matrix_arg(a);
  p.b = matrix_arg(b);
  p.d = out.raw_data();
  p.ldd = n;
  return p;
}

void gemm_cuda(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  HG_CHECK(out.device() == a_in.device() && out.device() == b_in.device(), "mm",
           "expected tensors on one device, got {}, {} and {}", out.device(), a_in.device(), b_in.device());
  HG_CHECK(out.is_contiguous(), "mm", "expected a contiguous output, got strides {}", out.strides());
  const int64_t batch = a_in.shape()[0], m = a_in.shape()[1], k = a_in.shape()[2], n = b_in.shape()[2];
  if (batch == 0 || m == 0 || n == 0) return;
  const int dev = out.device().index;
  if (k == 0) {  // an empty sum: zeros
    DeviceGuard guard(dev);
    HG_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, static_cast<size_t>(out.numel()) * element_size(out.dtype()),
                                  current_stream(dev)));
    return;
  }
  const Tensor a = readable(a_in), b = readable(b_in);
  blas::GemmProblem p = problem_for(out, a, b, m, n, k);
  p.batch = batch;
  p.d_batch_stride = m * n;
  blas::lt_matmul(p);
}

// The bias as the epilogues read it: n consecutive elements (a strided bias copied).
Tensor unit_stride_bias(const Tensor& bias_in) {
  if (bias_in.strides()[0] == 1 || bias_in.numel() <= 1) return bias_in;
  Tensor bias = empty(bias_in.shape(), TensorOptions(bias_in.dtype()).device(bias_in.device()));
  copy_stub(kCUDA, bias, bias_in);
  return bias;
}

// linear's forward: out = a b + bias in one cuBLASLt call (the bias epilogue).
void gemm_bias_cuda(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in) {
  HG_CHECK(out.device() == a_in.device() && out.device() == b_in.device() && out.device() == bias_in.device(), "linear",
           "expected tensors on one device, got {}, {}, {} and {}", out.device(), a_in.device(), b_in.device(),
           bias_in.device());
  HG_CHECK(out.is_contiguous() && a_in.dim() == 2 && b_in.dim() == 2 && bias_in.dim() == 1, "linear",
           "expected 2-d operands, a 1-d bias and a contiguous output");
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  if (m == 0 || n == 0) return;
  HG_CHECK(k > 0, "linear", "the fused bias GEMM needs k > 0");
  const Tensor a = readable(as_batch(a_in)), b = readable(as_batch(b_in));
  const Tensor bias = unit_stride_bias(bias_in);
  blas::GemmProblem p = problem_for(out, a, b, m, n, k);
  p.epilogue = blas::Epilogue::Bias;
  p.bias = bias.raw_data();
  blas::lt_matmul(p);
}

// linear's backward: out = a b (dW = dY^T X) and bias_grad = the sums of a's rows (db) in one
// cuBLASLt call (the BGRADB epilogue of the swapped problem; lt_matmul falls back to its column
// sum where cuBLASLt has no algorithm for it).
void gemm_bias_grad_cuda(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias_grad) {
  HG_CHECK(out.device() == a_in.device() && out.device() == b_in.device() && out.device() == bias_grad.device(),
           "linear", "expected tensors on one device, got {}, {}, {} and {}", out.device(), a_in.device(),
           b_in.device(), bias_grad.device());
  HG_CHECK(
      out.is_contiguous() && bias_grad.is_contiguous() && a_in.dim() == 2 && b_in.dim() == 2 && bias_grad.dim() == 1,
      "linear", "expected 2-d operands, a contiguous output and a contiguous 1-d bias gradient");
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  HG_CHECK(m > 0 && n > 0 && k > 0, "linear",
           "the bias-gradient GEMM needs non-empty operands, got [{}, {}] x [{}, {}]", m, k, k, n);
  const Tensor a = readable(as_batch(a_in)), b = readable(as_batch(b_in));
  blas::GemmProblem p = problem_for(out, a, b, m, n, k);
  p.epilogue = blas::Epilogue::BiasGradA;
  p.bias_grad = bias_grad.raw_data();
  blas::lt_matmul(p);
}

// Runs a GELU-epilogue GEMM; false where cuBLASLt has no algorithm for it or rejects it (said
// once per epilogue on stderr), so linear_gelu_linear runs the unfused kernels instead.
bool try_gelu_epilogue(const blas::GemmProblem& p, std::once_flag& warned, const char* name) {
  try {
    blas::lt_matmul(p);
    return true;
  } catch (const Error& e) {
    std::call_once(warned, [&] {
      std::fprintf(stderr,
                   "halfgrad warning: [linear_gelu_linear] cuBLASLt's %s epilogue failed (%s); running the unfused "
                   "kernels instead (this warning is shown once)\n",
                   name, e.what());
    });
    return false;
  }
}

// linear_gelu_linear's first GEMM: pre = a b + bias and out = gelu_tanh(pre) in one call (the
// GELU_AUX_BIAS epilogue writes pre as its aux matrix).
bool gemm_gelu_aux_cuda(const Tensor& out, const Tensor& pre, const Tensor& a_in, const Tensor& b_in,
                        const Tensor& bias_in) {
  HG_CHECK(out.is_contiguous() && pre.is_contiguous() && a_in.dim() == 2 && b_in.dim() == 2 && bias_in.dim() == 1,
           "linear_gelu_linear", "expected 2-d operands, a 1-d bias and contiguous outputs");
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  HG_CHECK(m > 0 && n > 0 && k > 0 && n % 8 == 0, "linear_gelu_linear",
           "the GELU epilogue needs non-empty operands and a width that is a multiple of 8, got [{}, {}] x [{}, {}]", m,
           k, k, n);
  const Tensor a = readable(as_batch(a_in)), b = readable(as_batch(b_in));
  const Tensor bias = unit_stride_bias(bias_in);
  blas::GemmProblem p = problem_for(out, a, b, m, n, k);
  p.epilogue = blas::Epilogue::GeluAuxBias;
  p.bias = bias.raw_data();
  p.aux = pre.raw_data();
  p.aux_ld = n;
  static std::once_flag warned;
  return try_gelu_epilogue(p, warned, "GELU_AUX_BIAS");
}

// linear_gelu_linear's hidden gradient: out = gelu_tanh'(pre) * (a b) with a = dY, b = the
// second weight, and bias_grad = the sums of out's columns (the first bias's gradient), in one
// call (the DGELU_BGRAD epilogue reading pre as its aux matrix).
bool gemm_dgelu_bgrad_cuda(const Tensor& out, const Tensor& bias_grad, const Tensor& a_in, const Tensor& b_in,
                           const Tensor& pre) {
  HG_CHECK(
      out.is_contiguous() && pre.is_contiguous() && bias_grad.is_contiguous() && a_in.dim() == 2 && b_in.dim() == 2,
      "linear_gelu_linear", "expected 2-d operands and contiguous outputs");
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  HG_CHECK(m > 0 && n > 0 && k > 0 && n % 8 == 0, "linear_gelu_linear",
           "the DGELU epilogue needs non-empty operands and a width that is a multiple of 8, got [{}, {}] x [{}, {}]",
           m, k, k, n);
  const Tensor a = readable(as_batch(a_in)), b = readable(as_batch(b_in));
  blas::GemmProblem p = problem_for(out, a, b, m, n, k);
  p.epilogue = blas::Epilogue::DGeluBGrad;
  p.bias_grad = bias_grad.raw_data();
  p.aux = pre.raw_data();
  p.aux_ld = n;
  static std::once_flag warned;
  return try_gelu_epilogue(p, warned, "DGELU_BGRAD");
}

}  // namespace

HG_REGISTER_KERNEL(gemm_stub, kCUDA, gemm_cuda);
HG_REGISTER_KERNEL(gemm_gelu_aux_stub, kCUDA, gemm_gelu_aux_cuda);
HG_REGISTER_KERNEL(gemm_dgelu_bgrad_stub, kCUDA, gemm_dgelu_bgrad_cuda);
HG_REGISTER_KERNEL(gemm_bias_stub, kCUDA, gemm_bias_cuda);
HG_REGISTER_KERNEL(gemm_bias_grad_stub, kCUDA, gemm_bias_grad_cuda);

}  // namespace hg::cuda
