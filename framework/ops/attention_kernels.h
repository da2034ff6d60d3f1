// Kernel plumbing behind attention.h: the argument blocks and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/attention.h"

namespace hg {

// q, k, v [B, H, L|S, E|Ev] in one dtype, with any strides (the op passes its inputs as they
// are: a kernel that needs them contiguous copies them, the CUDA flash kernels read them in
// place); out [B, H, L, Ev] with any strides (the op lays it out as [B, L, H, Ev] memory, and the
// backward gets it back as `out`); lse [B, H, L] in the compute dtype
// (float32, float64 for float64 inputs): the log-sum-exp of each scaled, masked score row, which
// the backward uses to recompute the weights. mask: undefined, or a (possibly zero-strided) view
// [B, H, L, S] of bool or of the compute dtype. The dropout keep-draw of weight (b, h, i, j) is
// splitmix64(seed + ((b H + h) L + i) S + j) >> 11 >= p 2^53, as the dropout kernels draw.
struct AttentionArgs {
  Tensor q, k, v, mask;
  double scale = 1.0;
  bool causal = false;
  double dropout_p = 0.0;
  uint64_t seed = 0;
};

using AttentionFn = void (*)(const Tensor& out, const Tensor& lse, const AttentionArgs& args);
HG_DECLARE_STUB(attention_stub, AttentionFn);

// Gradients of q, k, v (contiguous, in the inputs' dtype; grad_out contiguous) and, when defined, of the mask
// (contiguous [B, H, L, S] in the compute dtype: dL/dscores) from grad_out and the forward's out.
using AttentionBackwardFn = void (*)(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& gmask,
                                     const Tensor& grad_out, const Tensor& out, const Tensor& lse,
                                     const AttentionArgs& args);
HG_DECLARE_STUB(attention_backward_stub, AttentionBackwardFn);

}  // namespace hg
