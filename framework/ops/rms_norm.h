// rms_norm: x / sqrt(mean(x^2) + eps) over the trailing dims, times an optional weight (as
// PyTorch's F.rms_norm and nn.RMSNorm). Statistics in float32 for 16-bit inputs (float64 for float64).
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

// weight (optional) has shape normalized_shape. eps unset: the machine epsilon of the compute
// dtype (float32's for 16-bit and float32 inputs, float64's for float64), as PyTorch's eps=None.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

}  // namespace hg
