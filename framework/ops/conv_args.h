// The argument checks conv2d and conv_transpose2d share. Internal: not installed.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace hg::conv_args {

// Both tensors defined, a 3-d (unbatched) or 4-d input, a 4-d weight, one device and one
// floating dtype for input, weight and bias (when defined); input_layout and weight_layout name
// the expected shapes in the errors ("[N, C, H, W]", "[out, in/groups, kh, kw]").
void check_tensors(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const char* input_layout, const char* weight_layout);

// A stride, padding, dilation or output_padding argument of one value (both dimensions) or two.
void pair(const char* op, const std::vector<int64_t>& v, const char* what, int64_t out[2]);

}  // namespace hg::conv_args
