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

// Whether the conv2d forward kernel of `dev` applies Conv2dParams::relu itself (the CPU's and
// CUDA's, in their pass that adds the bias); on other backends conv2d_relu runs ReLU as a
// second pass over the output.
bool conv2d_relu_in_kernel(DeviceType dev);

// Whether the conv2d kernels of `dev` take channels-last activations of `dtype` as they are
// (CUDA's cuDNN path, not its float64 direct kernels; the CPU's, whose oneDNN primitives run
// NHWC and whose own loops make NCHW copies where they run); where not, conv2d runs a
// channels-last call on NCHW copies and lays the results out after.
bool conv2d_channels_last_in_kernel(DeviceType dev, Dtype dtype);
// Whether, in a channels-last call, they take the weight (and give its gradient) in the layout it
// has, OIHW or OHWI (the CPU's, whose oneDNN paths pack either into their own blocks); otherwise
// (CUDA's) the weight is laid out as the activations are.
bool conv2d_weight_as_given_in_kernel(DeviceType dev);
// Whether the backward kernels of `dev` take a float32 grad_weight beside 16-bit activations and
// weight (a widened gradient, widened_gradient_wanted in framework/op.h): they write the 16-bit
// gradient's values into it, widened exactly (the CPU's).
bool conv2d_widened_weight_grad_in_kernel(DeviceType dev);

// out [N,O,OH,OW] = conv(input [N,C,H,W], weight [O,C/groups,kh,kw]) + bias [O] (bias may be
// undefined). All tensors of one floating dtype, contiguous, or (conv2d_channels_last_in_kernel)
// input, out and the activation gradients channels-last, and the weight and its gradient too (or,
// where conv2d_weight_as_given_in_kernel, in the weight's own layout); out is allocated by the op.
using Conv2dForwardFn = void (*)(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                                 const Conv2dParams& p);

// grad_input [N,C,H,W] (overwritten) from grad_out [N,O,OH,OW] and weight.
using Conv2dBackwardDataFn = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                                      const Conv2dParams& p);

// grad_weight [O,C/groups,kh,kw] and, when defined, grad_bias [O] (both overwritten) from grad_out
// and input.
using Conv2dBackwardFilterFn = void (*)(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                        const Tensor& input, const Conv2dParams& p);
// conv2d's weight gradient (of shape w_shape, for grad_out and input x) as a differentiable op,
// "conv2d_weight_grad" (conv.cpp); conv_transpose2d's weight gradient is this with the roles of
// its input and output gradient swapped.
Tensor conv2d_weight_grad(const Tensor& grad_out, const Tensor& x, const Shape& w_shape, const Conv2dParams& p);

HG_DECLARE_STUB(conv2d_forward_stub, Conv2dForwardFn);
HG_DECLARE_STUB(conv2d_backward_data_stub, Conv2dBackwardDataFn);
HG_DECLARE_STUB(conv2d_backward_filter_stub, Conv2dBackwardFilterFn);

// Both backward passes in one call, for a backend that shares work between them (the CPU's oneDNN
// path puts grad_out in its layout once for both). Returns false, having written nothing, where
// it does not apply; then (or where it is not registered) the two stubs above run. Optional.
using Conv2dBackwardFn = bool (*)(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                  const Tensor& grad_out, const Tensor& input, const Tensor& weight,
                                  const Conv2dParams& p);
HG_DECLARE_STUB(conv2d_backward_stub, Conv2dBackwardFn);

// conv2d_relu_max_pool2d: a 2x2, stride-2 max pool (floor mode) over conv2d_relu's output.
// Optional: on a device without them the op is max_pool2d over conv2d_relu.
// out [N,O,H/2,W/2] gets each window's max (max_pool2d's rule: the first candidate seeds, a later
// one wins when larger or NaN) and which [N,O,H/2,W/2] (uint8) the chosen element's place in its
// window, 0..3 row-major. input [N,O,H,W] contiguous.
using MaxPool2x2CodesFn = void (*)(const Tensor& out, const Tensor& which, const Tensor& input);
HG_DECLARE_STUB(max_pool_2x2_codes_stub, MaxPool2x2CodesFn);
// conv2d_relu_max_pool2d's forward in one pass (optional; needs the two stubs around it too):
// pooled and which as max_pool_2x2_codes_stub gives them from conv2d_forward_stub's ReLU'd
// output [N,O,oh,ow], which is not kept: the CPU pools each sample's block while in cache.
// Returns false, having written nothing, where the backend's kernel for these tensors cannot:
// the op then runs the convolution and the pool apart. (The CPU's always can: where its oneDNN
// primitives decline, its im2col path pools each sample.)
using Conv2dReluMaxPoolForwardFn = bool (*)(const Tensor& pooled, const Tensor& which, const Tensor& input,
                                            const Tensor& weight, const Tensor& bias, const Conv2dParams& p, int64_t oh,
                                            int64_t ow);
HG_DECLARE_STUB(conv2d_relu_max_pool_forward_stub, Conv2dReluMaxPoolForwardFn);
// grad_input [N,O,H,W] (overwritten): grad_out at each window's chosen element where the pooled
// value `out` is positive (the ReLU's mask), 0 everywhere else.
using ReluMaxPool2x2BackwardFn = void (*)(const Tensor& grad_input, const Tensor& grad_out, const Tensor& which,
                                          const Tensor& out);
HG_DECLARE_STUB(relu_max_pool_2x2_backward_stub, ReluMaxPool2x2BackwardFn);
// conv2d_relu's and conv2d_relu_max_pool2d's backward in one call, from the op's own output
// gradient (optional): the convolution's output gradient (relu's gradient of it, or what
// relu_max_pool_2x2_backward_stub makes of it) is made a few samples at a time, right before those
// samples' input- and weight-gradient passes, and never kept whole.
struct Conv2dReluGrad {
  Tensor grad;   // the op's output gradient in its dtype: [N,O,OH,OW], or [N,O,OH/2,OW/2] after the pool
  Tensor out;    // the op's output, the same shape: its positive elements pass the gradient on
  Tensor which;  // after the pool: each window's choice (uint8, the same shape); else undefined
};
// grad_input, grad_weight and grad_bias (each may be undefined; not the first two both) are
// overwritten as the backward stubs write them; all tensors contiguous. Returns false, having
// written nothing, where it does not apply: the op then makes the whole output gradient and runs
// the backward stubs on it.
using Conv2dReluBackwardFn = bool (*)(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                      const Conv2dReluGrad& grad_out, const Tensor& input, const Tensor& weight,
                                      const Conv2dParams& p, int64_t oh, int64_t ow);
HG_DECLARE_STUB(conv2d_relu_backward_stub, Conv2dReluBackwardFn);

}  // namespace hg
