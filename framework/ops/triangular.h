// tril and triu: the lower or upper triangle of the last two dims (batched), the rest zero.
#pragma once

#include "framework/tensor.h"

namespace hg {

// Keeps x[..., i, j] where j - i <= diagonal (tril) or j - i >= diagonal (triu); any dtype, so
// tril(ones({L, L}, kBool)) is a causal mask.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

}  // namespace hg
