// Kernel plumbing behind copy.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/copy.h"

namespace hg {

// dst[i] = convert(src[i]) for tensors of one shape on one device (src may be broadcast, any
// dtypes, any strides).
using CopyFn = void (*)(const Tensor& dst, const Tensor& src);
HG_DECLARE_STUB(copy_stub, CopyFn);

// dst (float32) = src (float16 or bfloat16), both contiguous, of one shape on one device; returns
// whether every value was finite, found in the same pass (for GradScaler::step: see
// internal::note_all_finite). Optional: without it, widening goes through copy_stub, unmarked.
using WidenNotingFiniteFn = bool (*)(const Tensor& dst, const Tensor& src);
HG_DECLARE_STUB(widen_noting_finite_stub, WidenNotingFiniteFn);

// Contiguous same-dtype copy where one side is a CUDA tensor (installed by the CUDA backend).
HG_DECLARE_STUB(cross_device_copy_stub, CopyFn);

// dst[i] = value, for every element of dst.
using FillFn = void (*)(const Tensor& dst, double value);
HG_DECLARE_STUB(fill_stub, FillFn);

}  // namespace hg
