// 2-d pooling: max_pool2d (its backward routes gradients through saved argmax indices) and
// avg_pool2d, with PyTorch's padding, ceil_mode and count_include_pad rules.
#pragma once

#include "framework/op.h"

namespace hg {

struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};   // max pooling only
  bool count_include_pad = true;  // avg pooling only
};

// Kernels see contiguous [N, C, H, W] inputs and write contiguous [N, C, OH, OW] outputs.
// indices holds, per output, the flat index h * W + w of the max inside its input plane.
using MaxPool2dFn = void (*)(const Tensor& out, const Tensor& indices, const Tensor& input, const Pool2dParams& p);
// grad_input (overwritten) gets each grad_out element added at its saved index.
using MaxPool2dBackwardFn = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices);
using AvgPool2dFn = void (*)(const Tensor& out, const Tensor& input, const Pool2dParams& p);
using AvgPool2dBackwardFn = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p);
HG_DECLARE_STUB(max_pool2d_stub, MaxPool2dFn);
HG_DECLARE_STUB(max_pool2d_backward_stub, MaxPool2dBackwardFn);
HG_DECLARE_STUB(avg_pool2d_stub, AvgPool2dFn);
HG_DECLARE_STUB(avg_pool2d_backward_stub, AvgPool2dBackwardFn);

// x [N, C, H, W] or [C, H, W]. kernel, stride, padding and dilation take one value (both dims)
// or two; an empty stride means stride = kernel. NaN in a window wins, as in PyTorch.
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1},
                  bool ceil_mode = false);
// Mean over each window; with count_include_pad the divisor counts the zero padding too.
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);

}  // namespace hg
