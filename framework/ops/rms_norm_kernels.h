// Kernel plumbing behind rms_norm.h: the kernel function type and dispatch stub that kernels/cpu
// and kernels/cuda fill in. Internal: not installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/rms_norm.h"

namespace hg {

// x and out contiguous [rows, cols] of one floating dtype; rstd [rows] = 1 / sqrt(mean(x^2) + eps)
// written in the statistics dtype (float64 for float64 x, else float32); weight [cols] optional,
// x's dtype or float32. out = x * rstd * weight, computed in float32 (float64) and rounded once.
using RmsNormFn = void (*)(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps);
HG_DECLARE_STUB(rms_norm_stub, RmsNormFn);

}  // namespace hg
