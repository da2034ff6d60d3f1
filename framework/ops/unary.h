// Elementwise unary maths and activations.
#pragma once

#include "framework/op.h"

namespace hg {

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Log1p,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Abs,
  Sigmoid,
  Tanh,
  Relu,
  Gelu,
  GeluTanh,
  Softplus,
  PowScalar,
  Erf
};

// out = op(in), same shape and dtype (floating for all but Neg/Abs/Relu). p0, p1 are the op's
// parameters: the exponent for PowScalar; beta and threshold for Softplus.
using UnaryFn = void (*)(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1);
HG_DECLARE_STUB(unary_stub, UnaryFn);

// relu's gradient in one pass: grad_in = grad_out * (y > 0 ? 1 : 0) with y = relu(x), all of one
// shape and dtype. relu's backward uses it where the device has a kernel, else the same product
// built from gt and mul.
using ReluBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y);
HG_DECLARE_STUB(relu_backward_stub, ReluBackwardFn);

Tensor neg(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor log1p(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor reciprocal(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor relu(const Tensor& t);
// approximate=false: x Phi(x) with the exact erf; true: PyTorch's tanh approximation.
Tensor gelu(const Tensor& t, bool tanh_approximation = false);
// log(1 + exp(beta x)) / beta, linear above threshold (as PyTorch).
Tensor softplus(const Tensor& t, double beta = 1.0, double threshold = 20.0);
Tensor pow(const Tensor& t, double exponent);
Tensor erf(const Tensor& t);

}  // namespace hg
