// Copies and conversions: to(dtype/device), contiguous, clone, copy_ (kernels in copy_kernels.h).
#pragma once

#include "framework/op.h"

namespace hg {

Tensor to(const Tensor& t, Device device, Dtype dtype);
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);

}  // namespace hg
