// conv_transpose2d: the adjoint of conv2d (a "deconvolution"), as PyTorch's. It runs on
// convolution's backward-data kernels, and its gradients on conv2d and conv2d's backward-filter.
#pragma once

#include <vector>

#include "framework/tensor.h"

namespace hg {

// input [N, C_in, H, W] (or unbatched [C_in, H, W]), weight [C_in, C_out / groups, kh, kw], bias
// [C_out] or undefined. The output is (H - 1) stride - 2 padding + dilation (kh - 1) +
// output_padding + 1 high (likewise wide); output_padding must be smaller than stride or
// dilation. stride, padding, output_padding and dilation take one value (both dims) or two.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                        std::vector<int64_t> output_padding = {0, 0}, int64_t groups = 1,
                        std::vector<int64_t> dilation = {1, 1});

}  // namespace hg
