// Sorting along a dim: sort, argsort and topk. Sorts are stable (ties keep their order, so
// `stable` is always honoured), NaN counts as larger than every number (as PyTorch).
#pragma once

#include <utility>

#include "framework/tensor.h"

namespace hg {

// (values, int64 indices) sorted along dim; the gradient of the values goes back to the
// positions they came from.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (or smallest) values along dim and their int64 indices, in sorted order (sorted =
// false is accepted and gives the same order); equal values keep the order of their indices.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

}  // namespace hg
