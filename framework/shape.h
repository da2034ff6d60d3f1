// Shapes and strides (in elements), memory formats, and the helpers every op uses to check them.
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

// How a 4-d [N, C, H, W] tensor lies in memory, as PyTorch's torch.memory_format. The format is
// nothing but strides: ChannelsLast is the dense NHWC order (stride of C = 1, W = C, H = W*C,
// N = H*W*C) over the same NCHW dims. Preserve (where an op takes a format) keeps the input's.
enum class MemoryFormat { Contiguous, ChannelsLast, Preserve };
std::string_view memory_format_name(MemoryFormat format);
// The dense strides of `format` for `shape` (ChannelsLast needs 4 dims; throws naming `op`).
Strides format_strides(const Shape& shape, MemoryFormat format, std::string_view op);
// Whether (shape, strides) are the dense layout of `format`; strides of size-1 dims are not
// looked at (as is_contiguous). A tensor with C == 1 or H == W == 1 is both formats.
bool has_format(const Shape& shape, const Strides& strides, MemoryFormat format);
// PyTorch's suggest_memory_format: ChannelsLast for a 4-d channels-last tensor that is not also
// contiguous, else Contiguous. What ops that preserve the format give their outputs.
MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides);
// The dims of a tensor of `shape` in the order `strides` walks memory, outermost first (larger
// stride first, ties in dim order, size-1 dims dropped): the order the elementwise engines
// iterate in, so a channels-last output is written as one dense run.
std::vector<size_t> dims_in_memory_order(const Shape& shape, const Strides& strides);
// Maps a possibly negative dim into [0, ndim); throws "[op] dim ... out of range" otherwise.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);
// PyTorch's broadcasting of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace hg
