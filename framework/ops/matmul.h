// Matrix products: mm, bmm, matmul (with batch broadcasting) and linear.
#pragma once

#include "framework/op.h"

namespace hg {

// out[b] = a[b] @ b[b] for 3-d a [B,M,K], b [B,K,N] and a contiguous out [B,M,N] of one dtype.
// a and b may be transposed views (either of their last two strides equal to 1).
using GemmFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b);
HG_DECLARE_STUB(gemm_stub, GemmFn);
// out = a @ b + bias for 2-d a [M,K] (K > 0), b [K,N], bias [N] and a contiguous out [M,N], the bias
// added inside the GEMM (cuBLASLt's bias epilogue). Optional per device: linear uses it where
// the device has one, else gemm_stub and a broadcast add.
using GemmBiasFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
HG_DECLARE_STUB(gemm_bias_stub, GemmBiasFn);

Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
// x [*, in] @ weight [out, in]^T + bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace hg
