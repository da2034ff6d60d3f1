// The internal op tier: how ops build their insides (aliases, reshapes, transposes, broadcasts,
// contiguous copies, dtype casts) without going through OpCall. Nothing here autocasts, records
// an op event or attaches an autograd node, and no result requires grad: an op's user-visible
// effects are its own OpCall's alone. Internal: not installed.
#pragma once

#include <initializer_list>
#include <optional>

#include "framework/op.h"
#include "framework/tensor.h"

namespace hg::internal {

// A view of t's storage with this geometry; the caller vouches that it stays inside the storage.
Tensor alias(const Tensor& t, Shape shape, Strides strides, int64_t offset);
// The same geometry as a plain new contiguous layout of `shape` over t's storage (t contiguous).
Tensor alias_contiguous(const Tensor& t, const Shape& shape);
// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any exist.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape);
// A view of t with `shape` when its strides allow one, else a contiguous copy (as reshape).
Tensor reshaped(const Tensor& t, const Shape& shape);
// A 2-d t with its two dims swapped (a view).
Tensor transposed(const Tensor& t);
// t broadcast to `shape` (a view with zero strides where t has size 1 or lacks the dim).
Tensor expanded(const Tensor& t, const Shape& shape);
// t with a dim of size 1 inserted at `dim` (a view).
Tensor unsqueezed(const Tensor& t, int64_t dim);
// t when it is contiguous, else a contiguous copy on its device.
Tensor contiguous(const Tensor& t);
// A contiguous copy of t on `device` (same dtype), or t when it is already there.
Tensor moved_to(const Tensor& t, Device device);
// t when it already has `dtype`, else a contiguous copy converted to it on t's device.
Tensor cast(const Tensor& t, Dtype dtype);
// A fresh contiguous copy of t converted to `dtype` (always a copy). A float16/bfloat16 to
// float32 widening on a backend with widen_noting_finite_stub also notes whether the result is
// all finite (note_all_finite), in the same pass.
Tensor converted(const Tensor& t, Dtype dtype, MemoryFormat format = MemoryFormat::Contiguous);
// t when it is dense in `format` already, else a copy laid out so (same dtype and device).
Tensor laid_out(const Tensor& t, MemoryFormat format);
// The format an op that preserves it (elementwise, batch_norm, conv2d) gives its output: as
// PyTorch's TensorIterator, the first of `inputs` of the output's shape that is contiguous or
// channels-last decides (ChannelsLast only for 4-d outputs); Contiguous when none does.
MemoryFormat output_format(const Shape& out_shape, std::initializer_list<const Tensor*> inputs);
// Whether t is dense in a memory format's order: contiguous, or channels-last (a kernel may read
// it, and any tensor of the same strides, as one flat array).
bool is_dense(const Tensor& t);
// Whether t covers its whole storage (dense, from its first byte to its last).
bool owns_whole_storage(const Tensor& t);
// Finite marks: t (which owns its whole storage, freshly written) holds no inf or NaN, as of its
// storage's current version; and whether that is known of t now (false for a view, or once any
// in-place write has moved the version). A write through a raw data pointer moves no version:
// like autograd's saved-tensor check and amp's cast cache, the mark trusts in-place ops to be
// the only writers.
void note_all_finite(const Tensor& t);
bool known_all_finite(const Tensor& t);
// t as `dtype`, viewed as `shape` and contiguous, copied only where needed: how backward kernels
// read an incoming gradient (the gradient of a sum() arrives expanded, with zero strides).
Tensor dense_as(const Tensor& t, Dtype dtype, const Shape& shape);
// The [outer, size of dim, inner] alias of a contiguous tensor (0-d: [1, 1, 1]): how kernels see
// "the dim an op works along".
Tensor as_3d(const Tensor& contiguous, int64_t dim);

}  // namespace hg::internal
