// Adaptive 2-d pooling (torch.nn.functional.adaptive_avg_pool2d / adaptive_max_pool2d): the
// output size is given and each output reads the bin [floor(i In / Out), ceil((i + 1) In / Out))
// of the input along each dim, so bins may overlap when the sizes do not divide.
#pragma once

#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace hg {

// x [N, C, H, W] or [C, H, W] (floating, C, H and W non-empty); output_size {oh, ow} or {s} for
// both, each >= 0. A 1x1 output is the mean of each plane (global average pooling).
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
// The maxima and their int64 indices (h * W + w inside each plane), as libtorch's
// adaptive_max_pool2d; NaN in a bin wins, as PyTorch's.
std::pair<Tensor, Tensor> adaptive_max_pool2d(const Tensor& x, std::vector<int64_t> output_size);

}  // namespace hg
