// Normalisation layers: layer_norm and batch_norm (group_norm composes layer_norm), each with a fused forward kernel
// and a fused backward kernel (they sit on every training step's hot path). Statistics are computed in float32 for
// 16-bit inputs (float64 for float64).
#pragma once

#include "framework/tensor.h"

namespace hg {

// Normalises over the trailing dims given by normalized_shape, then scales and shifts
// (weight and bias of shape normalized_shape, both optional).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// x [N, C, ...]. training: normalises with the batch statistics over every dim but C and, when
// the running stats are given, updates them in place (running = (1 - momentum) running +
// momentum batch, with the unbiased variance, as PyTorch). eval: uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

// relu(batch_norm(x, ...) + residual), a ResNet block's tail, as one op (residual optional: then
// BatchNorm + ReLU). residual has x's shape, dtype and device. On CUDA the add and the ReLU run in
// batch_norm's normalising pass; elsewhere the three kernels run in turn, with the values of
// the three public ops. Channels-last as batch_norm.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                           const Tensor& bias, const Tensor& residual, bool training, double momentum = 0.1,
                           double eps = 1e-5);

// x [N, C, ...]: normalises each of num_groups groups of C / num_groups channels (with all their
// positions) per sample, then scales and shifts per channel (weight and bias [C], optional).
// Composed from reshape and layer_norm, so every backend, dtype and gradient of those applies;
// under autocast it runs in float32 and returns float32, as PyTorch's.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace hg
