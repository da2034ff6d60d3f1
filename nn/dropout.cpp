#include "nn/dropout.h"

#include "framework/ops/nn_misc.h"

namespace hg::nn {

Dropout::Dropout(double p) : Module("Dropout"), p_(p) {
  HG_CHECK(p >= 0 && p <= 1, "Dropout", "probability must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

}  // namespace hg::nn
