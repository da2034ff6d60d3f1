// Kernel plumbing behind norm.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/norm.h"

namespace hg {

// x viewed as contiguous [rows, cols], cols = numel(normalized_shape). mean and rstd [rows] are
// written in the statistics dtype (float64 for float64 x, else float32). weight and bias [cols]
// are optional and may be float32 when x is 16-bit.
using LayerNormFn = void (*)(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps);

// grad_x, grad_weight, grad_bias: each overwritten when defined.
using LayerNormBackwardFn = void (*)(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& weight);

// x viewed as contiguous [N, C, S], or, on a backend where batch_norm_channels_last_in_kernel, a
// 4-d channels-last x (then out, grad_out and grad_x are channels-last too: a per-channel
// reduction over the innermost dim of [N*H*W, C]). Writes out, and per channel the mean and 1/sqrt(var + eps)
// used (batch statistics when training, running ones otherwise). When training and defined,
// running_mean/running_var [C] (contiguous) are updated in place.
using BatchNormFn = void (*)(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                             const Tensor& running_var, bool training, double momentum, double eps);

using BatchNormBackwardFn = void (*)(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd, bool training);
// Whether the batch_norm kernels of `dev` take channels-last tensors as they are (CUDA's, the CPU's);
// elsewhere batch_norm runs on an NCHW copy and lays its outputs out channels-last after.
bool batch_norm_channels_last_in_kernel(DeviceType dev);

// batch_norm_add_relu's forward (optional): batch_norm_stub's outputs, with out = relu(normalised
// + residual) written in the same pass; residual (may be undefined) laid out as x.
using BatchNormAddReluFn = void (*)(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd,
                                    const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training,
                                    double momentum, double eps, const Tensor& residual);
HG_DECLARE_STUB(batch_norm_add_relu_stub, BatchNormAddReluFn);

HG_DECLARE_STUB(layer_norm_stub, LayerNormFn);
HG_DECLARE_STUB(layer_norm_backward_stub, LayerNormBackwardFn);
HG_DECLARE_STUB(batch_norm_stub, BatchNormFn);
HG_DECLARE_STUB(batch_norm_backward_stub, BatchNormBackwardFn);

}  // namespace hg
