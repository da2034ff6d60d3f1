// Kernel plumbing behind pool.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/pool.h"

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

}  // namespace hg
