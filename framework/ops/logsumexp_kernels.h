// Kernel plumbing behind logsumexp.h: the kernel function type and dispatch stub that kernels/cpu
// and kernels/cuda fill in. Internal: not installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/logsumexp.h"

namespace hg {

// out[o, i] = log(sum_j exp(in[o, j, i])) for `in` a contiguous [outer, n, inner] block and `out`
// a contiguous [outer, inner] one of the same floating dtype; float32 maths for 16-bit and float32
// data, float64 for float64.
using LogsumexpFn = void (*)(const Tensor& out, const Tensor& in);
HG_DECLARE_STUB(logsumexp_stub, LogsumexpFn);

}  // namespace hg
