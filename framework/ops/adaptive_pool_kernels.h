// Kernel plumbing behind adaptive_pool.h. Internal: not installed. The max pool's backward is
// max_pool2d's (pool_kernels.h): both scatter through saved indices.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/adaptive_pool.h"

namespace hg {

// in [P, H, W] and out [P, OH, OW], contiguous, one floating dtype: out = the mean of each bin
// (kernels/common/adaptive_bins.h), summed in float32 (float64 for float64).
using AdaptiveAvgPool2dFn = void (*)(const Tensor& out, const Tensor& in);
// grad_in [P, H, W] (overwritten) from grad_out [P, OH, OW]: each input element gathers g / bin size
// from the bins that hold it (no atomics: the bins holding row h are a range, see adaptive_bins.h).
using AdaptiveAvgPool2dBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out);
// out and indices [P, OH, OW] (indices int64, h * W + w) from in [P, H, W].
using AdaptiveMaxPool2dFn = void (*)(const Tensor& out, const Tensor& indices, const Tensor& in);
HG_DECLARE_STUB(adaptive_avg_pool2d_stub, AdaptiveAvgPool2dFn);
HG_DECLARE_STUB(adaptive_avg_pool2d_backward_stub, AdaptiveAvgPool2dBackwardFn);
HG_DECLARE_STUB(adaptive_max_pool2d_stub, AdaptiveMaxPool2dFn);

}  // namespace hg
