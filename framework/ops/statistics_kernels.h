// Kernel plumbing behind statistics.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/statistics.h"

namespace hg {

// Per row of a contiguous [rows, n] `in`: out[r] = sum((x - mean)^2) / max(n - correction, 0),
// two passes accumulating in float64 on the CPU (float32 for 16-bit inputs on CUDA); out [rows]
// has in's dtype.
using VarFn = void (*)(const Tensor& out, const Tensor& in, double correction);
HG_DECLARE_STUB(var_stub, VarFn);

// Per row of a contiguous [rows, n] `in`: out[r] = the p-norm of the row (p is 1, 2 or infinity);
// out [rows] may be float32 for a 16-bit `in` (autocast's float32-output policy).
using NormFn = void (*)(const Tensor& out, const Tensor& in, double p);
HG_DECLARE_STUB(norm_stub, NormFn);

}  // namespace hg
