// logsumexp: log(sum(exp(x))) over dims, computed stably (max-shifted) in one pass per row.
#pragma once

#include <vector>

#include "framework/tensor.h"

namespace hg {

// Reduces `dims` (empty: every dim, as PyTorch's dim=()); integer inputs compute in float32.
// Rows of -inf give -inf and rows holding +inf give +inf, as PyTorch's.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

}  // namespace hg
