// Kernel plumbing behind minmax.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/minmax.h"

namespace hg {

// out = min(max(in, lo), hi) elementwise (a missing bound is skipped; NaN stays NaN); out and in
// have one dtype and shape.
using ClampFn = void (*)(const Tensor& out, const Tensor& in, std::optional<double> lo, std::optional<double> hi);
HG_DECLARE_STUB(clamp_stub, ClampFn);

}  // namespace hg
