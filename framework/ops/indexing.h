// Indexing and joining: gather/scatter_add, index_select/index_add, where, masked_fill, cat,
// stack (max/min/argmax/clamp live in minmax.h, included here).
#pragma once

#include <optional>

#include "framework/ops/minmax.h"
#include "framework/tensor.h"

namespace hg {

// index: int64, as many dims as x, no larger than x in the dims other than `dim`.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Out-of-place: a copy of self with src added at the gathered positions (the gather gradient).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// index: int64, 1-d (or 0-d).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Out-of-place: a copy of self with src's slices added at rows `index` of dim.
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// cond (bool) ? a : b, broadcasting all three; a and b promote to a common dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// value where mask (bool, broadcast against x) is true, x elsewhere.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Joins along an existing dim (cat) or a new one (stack); dtypes promote.
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);

}  // namespace hg
