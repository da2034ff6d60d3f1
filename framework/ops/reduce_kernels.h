// Kernel plumbing behind reduce.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/reduce.h"

namespace hg {

// Reduces the last dim of a [outer, n] view `in` into out [outer] (values in out's dtype, or
// int64 indices for ArgMax/ArgMin). Sums accumulate in float32 (float64 for float64/int64).
using ReduceFn = void (*)(ReduceOp op, const Tensor& out, const Tensor& in);
HG_DECLARE_STUB(reduce_stub, ReduceFn);

// out[j] = sum over i of in[i, j] for a contiguous [rows, cols] `in` (out [cols], in out's dtype;
// accumulation as reduce_stub's Sum). Optional per device: sum() uses it, where the device has
// one, for a contiguous tensor reduced over its leading dims (bias gradients), instead of
// copying the tensor transposed for reduce_stub.
using SumColumnsFn = void (*)(const Tensor& out, const Tensor& in);
HG_DECLARE_STUB(sum_columns_stub, SumColumnsFn);

// Moves the reduced dims of `t` to the end and returns a contiguous [outer, inner] tensor with
// the kept shape; used by every reduction. With `columns_ok`, a contiguous `t` whose reduced dims
// are its leading ones (and not all of them) is not moved: `flat` is then t itself viewed as
// [inner, outer] and `columns` is set (reduce over dim 0 of flat).
struct ReduceLayout {
  Tensor flat;           // [outer, inner], or [inner, outer] when `columns`
  Shape out_shape;       // shape of the result (reduced dims dropped, or 1 with keepdim)
  Shape kept_shape;      // out shape with keepdim=true (for broadcasting gradients back)
  int64_t reduced = 1;   // inner: how many elements each result sums
  bool columns = false;  // flat is [inner, outer]
};
ReduceLayout reduce_layout(const Tensor& t, std::vector<int64_t> dims, bool keepdim, std::string_view op,
                           bool columns_ok = false);

}  // namespace hg
