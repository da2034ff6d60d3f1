// Copies and conversions: to(dtype/device), contiguous, clone, copy_ (kernels in copy_kernels.h).
#pragma once

#include "framework/tensor.h"

namespace hg {

Tensor to(const Tensor& t, Device device, Dtype dtype);
// to(t, t.device(), value.dtype()) where `value` already holds that conversion of t's current
// values (written by a fused optimizer step beside the new weights, see WarmCast): records the
// same op and gradient as to() without converting again. value must have t's shape and device.
Tensor to_with_result(const Tensor& t, const Tensor& value);
Tensor contiguous(const Tensor& t);
// t laid out in `format` (a copy only where it is not already); Preserve: t's own format, or
// contiguous where it has none of the named formats.
Tensor contiguous(const Tensor& t, MemoryFormat format);
// to(t, device, dtype), then in `format`.
Tensor to(const Tensor& t, Device device, Dtype dtype, MemoryFormat format);
Tensor clone(const Tensor& t);

}  // namespace hg
