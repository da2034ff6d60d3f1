#include "framework/nn/linear.h"

#include <cmath>

#include "framework/nn/init.h"
#include "framework/ops/creation.h"
#include "framework/ops/matmul.h"

namespace hg::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : Module("Linear"), in_(in_features), out_(out_features) {
  HG_CHECK(in_features > 0 && out_features > 0, "Linear", "features must be positive, got in {} out {}", in_features,
           out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    register_parameter("bias", bias, empty({out_features}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  HG_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear", "expected input [..., {}], got shape {}", in_, x.shape());
  return linear(x, weight, bias);
}

}  // namespace hg::nn
