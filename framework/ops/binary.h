// Elementwise binary arithmetic and comparisons, with broadcasting and type promotion.
#pragma once

#include "framework/tensor.h"

namespace hg {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge };

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// The 0-d tensor a Python scalar becomes next to `t`: t's dtype when it can hold the value's
// kind (float scalars turn integer tensors into float32), on t's device.
Tensor wrap_scalar(double value, const Tensor& t);

}  // namespace hg
