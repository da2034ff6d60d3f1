// 2-d pooling: max_pool2d (its backward routes gradients through saved argmax indices) and
// avg_pool2d, with PyTorch's padding, ceil_mode and count_include_pad rules.
#pragma once

#include "framework/tensor.h"

namespace hg {

// x [N, C, H, W] or [C, H, W]. kernel, stride, padding and dilation take one value (both dims)
// or two; an empty stride means stride = kernel. NaN in a window wins, as in PyTorch.
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1},
                  bool ceil_mode = false);
// Mean over each window; with count_include_pad the divisor counts the zero padding too.
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);

}  // namespace hg
