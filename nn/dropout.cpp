#include "nn/dropout.h"

#include "framework/ops/nn_misc.h"

namespace hg::nn {

Dropout::Dropout(DropoutOptions options) : Module("Dropout"), p_(options.p) {
  HG_CHECK(p_ >= 0 && p_ <= 1, "Dropout", "probability must be in [0, 1], got {}", p_);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

}  // namespace hg::nn
