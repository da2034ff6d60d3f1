// Shapes and strides (in elements), and the helpers every op uses to check them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace hg {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// Maps a possibly negative dim into [0, ndim); throws "[op] dim ... out of range" otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);
// PyTorch's broadcasting of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace hg
