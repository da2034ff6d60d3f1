// Matrix products: mm, bmm, matmul (with batch broadcasting) and linear.
#pragma once

#include "framework/tensor.h"

namespace hg {

Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
// x [*, in] @ weight [out, in]^T + bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace hg
