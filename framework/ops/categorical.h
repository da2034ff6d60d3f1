// Class indices: one_hot encoding and multinomial sampling (from the global generator, seeded by
// manual_seed like rand/randn). Neither has a gradient.
#pragma once

#include "framework/tensor.h"

namespace hg {

// int64 tensor of shape indices.shape + [num_classes] with a 1 at each class index; indices are
// int64 in [0, num_classes). num_classes = -1 takes the largest index + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// num_samples int64 class indices per row of `probs` (1-d [n] or 2-d [rows, n]: non-negative,
// finite weights with a positive sum per row, not necessarily normalised). Without replacement a
// class is drawn at most once (so at most as many samples as non-zero weights per row), in
// the order drawn.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

}  // namespace hg
