// Kernel plumbing behind scan.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/scan.h"

namespace hg {

// Inclusive prefix sums along dim 1 of contiguous [outer, n, inner] tensors; out's dtype may
// differ from in's (accumulation in float64 for floating outputs on the CPU, float32 for 16-bit
// ones on CUDA; int64 for integers).
using CumsumFn = void (*)(const Tensor& out, const Tensor& in);
HG_DECLARE_STUB(cumsum_stub, CumsumFn);

}  // namespace hg
