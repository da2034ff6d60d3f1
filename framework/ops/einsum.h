// einsum: torch.einsum's equations (implicit or explicit "->" output, "..." broadcasting dims,
// an index repeated inside one operand taking the diagonal), lowered to permutes, reshapes, sums,
// products and bmm, so autograd and autocast (bmm's lower precision) come with those ops.
#pragma once

#include <string_view>

#include "framework/tensor.h"

namespace hg {

// einsum("bij,bjk->bik", {a, b}); any number of operands, contracted left to right in pairs.
Tensor einsum(std::string_view equation, const TensorList& operands);

}  // namespace hg
