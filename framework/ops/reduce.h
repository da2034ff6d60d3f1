// Reductions: sum, mean, max, min, argmax (float16/bfloat16 accumulate in float32).
#pragma once

#include <optional>

#include "framework/op.h"

namespace hg {

enum class ReduceOp : uint8_t { Sum, Max, Min, ArgMax, ArgMin };

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

Tensor sum(const Tensor& t, std::optional<Dtype> dtype = std::nullopt);
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false,
           std::optional<Dtype> dtype = std::nullopt);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

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
