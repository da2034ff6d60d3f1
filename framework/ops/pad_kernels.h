// Kernel plumbing behind pad.h: the non-constant modes' gather (forward) and scatter-add
// (backward) kernels. Constant mode needs none: it is a fill and a strided copy. Internal: not
// installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/pad.h"

namespace hg {

enum class PadMode : int { Constant, Reflect, Replicate, Circular };

// The padded dims, always three (leading ones of size 1 and no padding when fewer are padded):
// the input's and output's sizes and the pad before each dim (negative: cropped).
struct PadGeometry {
  PadMode mode = PadMode::Reflect;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t before[3] = {0, 0, 0};
};

// out [B, out0, out1, out2] contiguous, in [B, in0, in1, in2] contiguous, one floating dtype:
// each output element copies the input element the mode maps it to (kernels/common/pad_index.h).
using PadFn = void (*)(const Tensor& out, const Tensor& in, const PadGeometry& g);
// grad_in [B, in...] (overwritten) = the sum of grad_out's elements over the outputs that copy
// each input element (accumulated in float32, float64 for float64, rounded once).
using PadBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const PadGeometry& g);
HG_DECLARE_STUB(pad_stub, PadFn);
HG_DECLARE_STUB(pad_backward_stub, PadBackwardFn);

}  // namespace hg
