#include "nn/activation.h"

#include "framework/ops/unary.h"

namespace hg::nn {

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, slope_); }
Tensor ELU::forward(const Tensor& x) { return elu(x, alpha_); }
Tensor SELU::forward(const Tensor& x) { return selu(x); }
Tensor Mish::forward(const Tensor& x) { return mish(x); }
Tensor Hardswish::forward(const Tensor& x) { return hardswish(x); }
Tensor Softplus::forward(const Tensor& x) { return softplus(x, options_.beta, options_.threshold); }

}  // namespace hg::nn
