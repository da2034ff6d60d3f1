// Composite shape ops built on views and gathers: chunk and split (narrow views of the input),
// repeat (expand, then reshape) and flip (index_select along each flipped dim).
#pragma once

#include <vector>

#include "framework/tensor.h"

namespace hg {

// Pieces of ceil(size / chunks) along dim (the last may be smaller; fewer pieces when size is
// small, as PyTorch). Each is a view of x.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Pieces of split_size along dim (the last may be smaller), or of the given sizes (which must add
// up to the dim's size). Note split(x, {2}) is the int overload; use split_with_sizes for a list of one.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
// x tiled repeats[i] times along dim i; repeats may have more entries than x has dims (leading
// dims of size 1 are added first, as PyTorch).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
// x with the order of elements reversed along each of `dims` (a copy).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace hg
