// Scans along a dim: cumsum (integers and bool sum into int64, as PyTorch).
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

// out[..., i, ...] = sum of x[..., 0..i, ...] along dim; `dtype` converts before summing.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<Dtype> dtype = std::nullopt);

}  // namespace hg
