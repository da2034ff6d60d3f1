// Indexing and joining: gather/scatter_add, index_select/index_add, where, masked_fill, cat,
// stack (max/min/argmax/clamp live in minmax.h, included here).
#pragma once

#include <optional>

#include "framework/op.h"
#include "framework/ops/minmax.h"

namespace hg {

// The index kernels return the first index value outside [0, size of `dim`), if any, having
// written nothing they should not; the op turns it into an error naming itself.
// out[p] = x[p with p[dim] = index[p]]: out and index contiguous, of index's shape.
using GatherFn = std::optional<int64_t> (*)(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
HG_DECLARE_STUB(gather_stub, GatherFn);
// self[p with p[dim] = index[p]] += src[p] for every p of index's shape (self contiguous).
using ScatterAddFn = std::optional<int64_t> (*)(const Tensor& self, int64_t dim, const Tensor& index,
                                                const Tensor& src);
HG_DECLARE_STUB(scatter_add_stub, ScatterAddFn);
// out [outer, m, inner] = x [outer, n, inner] at rows index[0..m) (all contiguous).
using IndexSelectFn = std::optional<int64_t> (*)(const Tensor& out, const Tensor& x, const Tensor& index);
HG_DECLARE_STUB(index_select_stub, IndexSelectFn);
// self [outer, n, inner] rows index[j] += src [outer, m, inner] row j (all contiguous).
using IndexAddFn = std::optional<int64_t> (*)(const Tensor& self, const Tensor& index, const Tensor& src);
HG_DECLARE_STUB(index_add_stub, IndexAddFn);
// out = cond ? a : b, all of out's shape (broadcast views allowed); a, b and out share a dtype.
using WhereFn = void (*)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
HG_DECLARE_STUB(where_stub, WhereFn);

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
