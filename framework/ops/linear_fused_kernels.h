// Kernel plumbing behind linear_fused.h: the GEMMs with a GELU epilogue, optional per device
// (CUDA's cuBLASLt has them; elsewhere linear_gelu_linear runs linear's and gelu's kernels).
// Each returns false, having written nothing the caller keeps, where the device's library has no
// algorithm for the problem; the op then runs the unfused kernels. Internal: not installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/linear_fused.h"

namespace hg {

// pre = a @ b + bias and out = gelu_tanh(pre), for 2-d a [M,K] (K > 0), b [K,N], bias [N] and
// contiguous out, pre [M,N], all of one dtype; N a multiple of 8 (cuBLASLt's rule for the aux matrix).
using GemmGeluAuxFn = bool (*)(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                               const Tensor& bias);
HG_DECLARE_STUB(gemm_gelu_aux_stub, GemmGeluAuxFn);

// out = gelu_tanh'(pre) * (a @ b) and bias_grad[n] = the sum of out's column n, for 2-d a [M,K]
// (K > 0), b [K,N], contiguous pre and out [M,N] and a contiguous bias_grad [N], of one dtype; N a
// multiple of 8.
using GemmDGeluBGradFn = bool (*)(const Tensor& out, const Tensor& bias_grad, const Tensor& a, const Tensor& b,
                                  const Tensor& pre);
HG_DECLARE_STUB(gemm_dgelu_bgrad_stub, GemmDGeluBGradFn);

}  // namespace hg
