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

Tensor sum(const Tensor& t, std::optional<Dtype> dtype = std::nullopt);
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false,
           std::optional<Dtype> dtype = std::nullopt);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

// Moves the reduced dims of `t` to the end and returns a contiguous [outer, inner] tensor with
// the kept shape; used by every reduction.
struct ReduceLayout {
  Tensor flat;       // [outer, inner]
  Shape out_shape;   // shape of the result (reduced dims dropped, or 1 with keepdim)
  Shape kept_shape;  // out shape with keepdim=true (for broadcasting gradients back)
};
ReduceLayout reduce_layout(const Tensor& t, std::vector<int64_t> dims, bool keepdim, std::string_view op);

}  // namespace hg
