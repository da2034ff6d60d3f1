// Shapes and strides (in elements), and the helpers every op uses to check them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace hg {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
// The one place sizes are validated (every tensor is made through empty() or the Tensor
// constructor, which call these). checked_numel throws "[op] ..." on a negative dimension or when
// the element count, the contiguous extent (product of max(dim, 1), which bounds every stride)
// or the byte count at `element_size` bytes per element overflows int64.
int64_t checked_numel(const Shape& shape, std::string_view op, size_t element_size = 1);
// For a view with at least one element: checks that ranks match and that every element lies in
// [0, capacity) elements of the storage, without overflowing on the way.
void check_view_bounds(const Shape& shape, const Strides& strides, int64_t offset, int64_t capacity,
                       std::string_view op);
Strides contiguous_strides(const Shape& shape);
// Maps a possibly negative dim into [0, ndim); throws "[op] dim ... out of range" otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);
// PyTorch's broadcasting of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace hg
