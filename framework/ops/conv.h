// 2-d convolution (conv2d) and the three kernel stubs behind it: forward, backward data and
// backward filter, shaped so a CUDA backend can plug cuDNN's matching calls into each one.
#pragma once

#include "framework/op.h"

namespace hg {

// Geometry of one conv2d call, resolved and checked by the op.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

// out [N,O,OH,OW] = conv(input [N,C,H,W], weight [O,C/groups,kh,kw]) + bias [O] (bias may be
// undefined). All tensors contiguous and of one floating dtype; out is allocated by the op.
using Conv2dForwardFn = void (*)(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                                 const Conv2dParams& p);
// grad_input [N,C,H,W] (overwritten) from grad_out [N,O,OH,OW] and weight.
using Conv2dBackwardDataFn = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                                      const Conv2dParams& p);
// grad_weight [O,C/groups,kh,kw] and, when defined, grad_bias [O] (both overwritten) from grad_out
// and input.
using Conv2dBackwardFilterFn = void (*)(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                        const Tensor& input, const Conv2dParams& p);
HG_DECLARE_STUB(conv2d_forward_stub, Conv2dForwardFn);
HG_DECLARE_STUB(conv2d_backward_data_stub, Conv2dBackwardDataFn);
HG_DECLARE_STUB(conv2d_backward_filter_stub, Conv2dBackwardFilterFn);

// PyTorch's conv2d: input [N,C,H,W] (or unbatched [C,H,W]), weight [O, C/groups, kh, kw],
// optional bias [O]. stride, padding and dilation take one value (both dims) or two.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

}  // namespace hg
