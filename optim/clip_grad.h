// Gradient clipping by total norm and by value, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
#pragma once

#include <limits>

#include "framework/tensor.h"

namespace hg::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales the gradients of `params` in place so their joint norm (of order `norm_type`, or
// kInfNorm for the largest magnitude) is at most max_norm: each gradient is multiplied by
// min(1, max_norm / (total + 1e-6)). Returns the total norm before clipping (0-d float32).
// With error_if_nonfinite a NaN or infinite norm throws instead (on CUDA that check is the one
// host wait: without it the norm and the clip stay on the device). Parameters without a
// gradient are skipped.
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient of `params` in place to [-clip_value, clip_value] (NaN stays NaN, as
// PyTorch's clamp_). Parameters without a gradient are skipped.
void clip_grad_value_(const TensorList& params, double clip_value);

}  // namespace hg::optim
