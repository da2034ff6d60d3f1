// max/min (whole tensor, or along a dim with indices), argmax/argmin, and clamp.
#pragma once

#include <optional>
#include <utility>

#include "framework/op.h"

namespace hg {

// Whole-tensor max / min (0-d). The gradient is shared evenly among tied maxima, as PyTorch.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// (values, int64 indices) along dim; the first extreme wins ties and the gradient goes to it.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// At least one bound is needed. The gradient passes where min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

}  // namespace hg
