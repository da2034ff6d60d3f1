// 2-d convolution (conv2d). Its three kernel stubs (forward, backward data, backward filter) are
// in conv_kernels.h, shaped so a CUDA backend can plug cuDNN's matching calls into each one.
#pragma once

#include "framework/op.h"

namespace hg {

// PyTorch's conv2d: input [N,C,H,W] (or unbatched [C,H,W]), weight [O, C/groups, kh, kw],
// optional bias [O]. stride, padding and dilation take one value (both dims) or two.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

}  // namespace hg
