// Kernel plumbing behind nn_misc.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/nn_misc.h"

namespace hg {

// Fills `mask` (dense: contiguous or channels-last, floating) with 0 (probability p) or
// 1 / (1 - p), drawing the i-th element in memory order
// from a counter-based generator keyed by `seed`, so the result does not depend on threading.
using DropoutMaskFn = void (*)(const Tensor& mask, double p, uint64_t seed);
HG_DECLARE_STUB(dropout_mask_stub, DropoutMaskFn);

}  // namespace hg
