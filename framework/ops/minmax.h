// max/min (whole tensor, or along a dim with indices), argmax/argmin, and clamp (scalar or tensor bounds).
#pragma once

#include <optional>
#include <utility>

#include "framework/tensor.h"

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
// Tensor bounds (an undefined Tensor() is no bound), broadcast against x (the result has the broadcast shape and
// promoted dtype). A composite of where: the gradient goes to x where min <= x <= max, else to the bound that won.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);

}  // namespace hg
