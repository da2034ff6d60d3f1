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
  Erf,
  LeakyRelu,
  Elu,
  Mish,
  Hardswish
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
// x where x > 0, else negative_slope * x (as PyTorch's leaky_relu).
Tensor leaky_relu(const Tensor& t, double negative_slope = 0.01);
// x where x > 0, else alpha (exp(x) - 1) (as PyTorch's elu).
Tensor elu(const Tensor& t, double alpha = 1.0);
// scale * elu(x, alpha) with PyTorch's fixed alpha = 1.6732632423543772 and scale = 1.0507009873554805.
Tensor selu(const Tensor& t);
// x tanh(softplus(x)).
Tensor mish(const Tensor& t);
// x relu6(x + 3) / 6.
Tensor hardswish(const Tensor& t);
Tensor erf(const Tensor& t);

}  // namespace hg
