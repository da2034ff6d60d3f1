#include "nn/linear.h"

#include <cmath>

#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/matmul.h"
#include "framework/ops/softmax.h"
#include "framework/ops/unary.h"
#include "nn/init.h"

namespace hg::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : Module("Linear"), in_(in_features), out_(out_features) {
  HG_CHECK(in_features > 0 && out_features > 0, "Linear", "features must be positive, got in {} out {}", in_features,
           out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias) {
    register_parameter("bias", bias, empty({out_features}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  HG_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear", "expected input [..., {}], got shape {}", in_, x.shape());
  return linear(x, weight, bias);
}

GELU::GELU(GELUOptions options) : Module("GELU"), tanh_(options.approximate == "tanh") {
  HG_CHECK(options.approximate == "none" || options.approximate == "tanh", "GELU",
           "approximate must be \"none\" or \"tanh\", got \"{}\"", options.approximate);
}

// No fused silu op: the two ops give the same values and gradients (and pass through autocast).
Tensor SiLU::forward(const Tensor& x) { return x * sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim_); }

}  // namespace hg::nn
