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
Tensor clone(const Tensor& t);

}  // namespace hg
