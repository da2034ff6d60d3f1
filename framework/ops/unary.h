// Elementwise unary maths and activations.
#pragma once

#include "framework/tensor.h"

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
