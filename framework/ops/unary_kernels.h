// Kernel plumbing behind unary.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/unary.h"

namespace hg {

// out = op(in), same shape and dtype (floating for all but Neg/Abs/Relu). p0, p1 are the op's
// parameters: the exponent for PowScalar; beta and threshold for Softplus.
using UnaryFn = void (*)(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1);
HG_DECLARE_STUB(unary_stub, UnaryFn);

// relu's gradient in one pass: grad_in = grad_out * (y > 0 ? 1 : 0) with y = relu(x), all of one
// shape and dtype. relu's backward uses it where the device has a kernel, else the same product
// built from gt and mul.
using ReluBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y);
HG_DECLARE_STUB(relu_backward_stub, ReluBackwardFn);

// relu's backward formula, g * (y > 0), for ops that fuse a ReLU into their output (conv2d_relu):
// the one-pass kernel recorded as "relu_backward" where it applies, else public ops (and so
// differentiable under create_graph), exactly as relu's own backward.
Tensor relu_gradient(const Tensor& g, const Tensor& y);

// gelu's backward formula, g * gelu'(x) (the tanh form's when approx), for ops that fuse a GELU
// (linear_gelu_linear): the one-pass kernel recorded as "gelu_backward" where it applies, else
// public ops (differentiable under create_graph), exactly as gelu's own backward.
Tensor gelu_gradient(const Tensor& g, const Tensor& x, bool approx);

// gelu's gradient in one pass: grad_in = grad_out * gelu'(x) (the tanh form's when approx), all
// of one shape and floating dtype, computed in float32 or wider and rounded once. gelu's backward
// uses it where the device has a kernel, else the same formula built from public ops.
using GeluBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& x, bool approx);
HG_DECLARE_STUB(gelu_backward_stub, GeluBackwardFn);

}  // namespace hg
