// Kernel plumbing behind matmul.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include <utility>

#include "framework/dispatch.h"
#include "framework/op.h"
#include "framework/ops/matmul.h"

namespace hg {

// out[b] = a[b] @ b[b] for 3-d a [B,M,K], b [B,K,N] and a contiguous out [B,M,N] of one dtype.
// a and b may be transposed views (either of their last two strides equal to 1).
using GemmFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b);
HG_DECLARE_STUB(gemm_stub, GemmFn);

// out = a @ b + bias for 2-d a [M,K] (K > 0), b [K,N], bias [N] and a contiguous out [M,N], the bias
// added inside the GEMM where the device's library can (cuBLASLt's bias epilogue; oneDNN's bias
// on the CPU). Optional per device: linear uses it where the device has one, else gemm_stub and
// a broadcast add.
using GemmBiasFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
HG_DECLARE_STUB(gemm_bias_stub, GemmBiasFn);

// out = a @ b and bias_grad[m] = the sum of a's row m, for 2-d a [M,K] (K > 0), b [K,N], a contiguous
// out [M,N] and a contiguous bias_grad [M], all of one dtype: linear's weight and bias gradients
// (a = dY^T) in one GEMM, the sum done by its epilogue (cuBLASLt's BGRADB). Optional per device:
// linear's backward uses it where the device has one and its weight gradient is not widened, else
// mm and sum.
using GemmBiasGradFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias_grad);
HG_DECLARE_STUB(gemm_bias_grad_stub, GemmBiasGradFn);

// Inside a backward formula: a linear layer's weight and bias gradients g2^T x2 and sum(g2, {0}),
// for g2 [N, out] and x2 [N, in]: one gemm_bias_grad_stub call where the device has it (recorded
// as one "mm"), else mm (widened where the engine grants it for input `weight_input`) and sum.
// linear and linear_gelu_linear use it.
std::pair<Tensor, Tensor> linear_param_gradients(const Tensor& g2, const Tensor& x2, size_t weight_input);

// out = a @ b for 2-d 16-bit a [M,K] (K > 0), b [K,N] and a contiguous float32 out [M,N]
// holding each element rounded to a's dtype, then widened: what to(mm(a, b), kFloat32) gives, in
// one pass. Optional per device: linear's weight gradient uses it where the engine lets that
// gradient go on widened (widened_gradient_wanted, framework/op.h). Returns whether every value
// written is finite (false when not known), for internal::note_all_finite.
using GemmWidenedFn = bool (*)(const Tensor& out, const Tensor& a, const Tensor& b);
HG_DECLARE_STUB(gemm_widened_stub, GemmWidenedFn);

}  // namespace hg
