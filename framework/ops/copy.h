// Copies and conversions: to(dtype/device), contiguous, clone, copy_, and the kernels behind them.
#pragma once

#include "framework/op.h"

namespace hg {

// dst[i] = convert(src[i]) for tensors of one shape on one device (src may be broadcast, any
// dtypes, any strides).
using CopyFn = void (*)(const Tensor& dst, const Tensor& src);
HG_DECLARE_STUB(copy_stub, CopyFn);
// Contiguous same-dtype copy where one side is a CUDA tensor (installed by the CUDA backend).
HG_DECLARE_STUB(cross_device_copy_stub, CopyFn);
// dst[i] = value, for every element of dst.
using FillFn = void (*)(const Tensor& dst, double value);
HG_DECLARE_STUB(fill_stub, FillFn);

Tensor to(const Tensor& t, Device device, Dtype dtype);
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);

}  // namespace hg
