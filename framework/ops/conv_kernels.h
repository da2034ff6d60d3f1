// Kernel plumbing behind conv.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/conv.h"

namespace hg {

// Geometry of one conv2d call, resolved and checked by the op.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
  // Forward only: ReLU applied to the output after the bias, in the kernel's pass over it
  // (conv2d_relu). Set only for backends that list it in conv2d_relu_in_kernel; the backward
  // kernels ignore it.
  bool relu = false;
};

// Whether the conv2d forward kernel of `dev` applies Conv2dParams::relu itself (the CPU's); on
// other backends conv2d_relu runs ReLU as a second pass over the output.
bool conv2d_relu_in_kernel(DeviceType dev);

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

}  // namespace hg
