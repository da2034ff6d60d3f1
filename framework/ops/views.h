// View ops: results share storage with their input (reshape copies only when it must).
#pragma once

#include "framework/tensor.h"

namespace hg {

Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
// Strided alias of t's storage (no checks beyond bounds; for ops that build views).
Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);

// Sums `grad` over the dims broadcasting added, so it has `shape` again (used by autograd).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace hg
