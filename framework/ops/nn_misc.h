// Layers that are single ops: embedding (a row lookup) and dropout.
#pragma once

#include "framework/tensor.h"

namespace hg {

// Rows of weight [V, D] picked by indices (int64 or int32, any shape): shape indices.shape + [D].
// The weight's gradient adds up the rows of every lookup of an index.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// In training, zeroes each element with probability p and scales the rest by 1 / (1 - p); the
// mask comes from the global generator (hg::manual_seed makes it reproducible). Identity when
// not training. p must be in [0, 1]; p = 1 gives zeros (as PyTorch).
Tensor dropout(const Tensor& x, double p, bool training = true);

}  // namespace hg
