// Normalisation layers: layer_norm and batch_norm, each with a fused forward kernel and a fused
// backward kernel (they sit on every training step's hot path). Statistics are computed in
// float32 for 16-bit inputs (float64 for float64).
#pragma once

#include "framework/op.h"

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
// x viewed as contiguous [N, C, S]. Writes out, and per channel the mean and 1/sqrt(var + eps)
// used (batch statistics when training, running ones otherwise). When training and defined,
// running_mean/running_var [C] (contiguous) are updated in place.
using BatchNormFn = void (*)(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                             const Tensor& running_var, bool training, double momentum, double eps);
using BatchNormBackwardFn = void (*)(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                                     const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd, bool training);
HG_DECLARE_STUB(layer_norm_stub, LayerNormFn);
HG_DECLARE_STUB(layer_norm_backward_stub, LayerNormBackwardFn);
HG_DECLARE_STUB(batch_norm_stub, BatchNormFn);
HG_DECLARE_STUB(batch_norm_backward_stub, BatchNormBackwardFn);

// Normalises over the trailing dims given by normalized_shape, then scales and shifts
// (weight and bias of shape normalized_shape, both optional).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// x [N, C, ...]. training: normalises with the batch statistics over every dim but C and, when
// the running stats are given, updates them in place (running = (1 - momentum) running +
// momentum batch, with the unbiased variance, as PyTorch). eval: uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace hg
