// Kernel plumbing behind interpolate.h. Internal: not installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/interpolate.h"

namespace hg {

struct InterpParams {
  bool bilinear = false;
  bool align_corners = false;
  // The caller's scale factor per dim (h, w), or 0 when the map uses in / out (a size was given,
  // or recompute_scale_factor): kernels/common/interp_index.h.
  double scale[2] = {0, 0};
};

// out [P, OH, OW] from in [P, H, W], contiguous, one floating dtype.
using InterpolateFn = void (*)(const Tensor& out, const Tensor& in, const InterpParams& p);
// grad_in [P, H, W] (overwritten) = the adjoint map of grad_out [P, OH, OW], summed in float32
// (float64 for float64) and rounded once.
using InterpolateBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const InterpParams& p);
HG_DECLARE_STUB(interpolate_stub, InterpolateFn);
HG_DECLARE_STUB(interpolate_backward_stub, InterpolateBackwardFn);

}  // namespace hg
