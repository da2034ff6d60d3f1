// 2-d convolution (conv2d), and conv1d composed through it. Its three kernel stubs (forward, backward data, backward
// filter) are in conv_kernels.h, shaped so a CUDA backend can plug cuDNN's matching calls into each one.
#pragma once

#include "framework/tensor.h"

namespace hg {

// PyTorch's conv2d: input [N,C,H,W] (or unbatched [C,H,W]), weight [O, C/groups, kh, kw],
// optional bias [O]. stride, padding and dilation take one value (both dims) or two.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

// relu(conv2d(...)) as one op ("conv2d_relu", the lower precision under autocast as conv2d), with
// exactly its values (NaN stays NaN): the CPU applies the ReLU to each output block while the
// convolution still has it in cache, other backends as a second pass. Its gradient is conv2d's
// of the masked gradient; the CPU masks each sample's (or chunk's) right before its backward
// passes, so the whole masked gradient is never written. nn::Sequential calls it for a Conv2d
// followed by a ReLU when neither has hooks.
Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                   std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                   std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

// max_pool2d(conv2d_relu(...), 2) as one op ("conv2d_relu_max_pool2d", lower precision under
// autocast): a 2x2, stride-2 max pool in floor mode, with exactly the values and gradients of
// the two ops. The convolution's output is not kept for backward: the pooled output and a byte
// per window saying which element it chose are enough, and the backward makes the convolution's
// output gradient in one pass (the pool's scatter and the ReLU's mask together). On the CPU the
// forward pools each sample's output while it is in cache (each chunk of samples where oneDNN's
// bfloat16 convolution runs), and the backward makes each sample's (chunk's) output gradient
// right before its backward passes, so neither the whole output nor its gradient ever exists.
// Devices without those kernels run the two ops. nn::Sequential calls it for Conv2d, ReLU, MaxPool2d(2) without hooks.
Tensor conv2d_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

// PyTorch's conv1d: input [N, C, L] (or unbatched [C, L]), weight [O, C/groups, k], optional
// bias [O]. Runs as conv2d on a height-1 image, so every backend, dtype, autocast rule (lower
// precision) and gradient of conv2d applies.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

}  // namespace hg
