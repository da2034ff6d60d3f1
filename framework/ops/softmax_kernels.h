// Kernel plumbing behind softmax.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/softmax.h"

namespace hg {

// Normalises `in` viewed as a contiguous [outer, n, inner] block along n into out (same layout).
// in and out may differ in dtype (autocast's float32 output reads float16 input directly).
using SoftmaxFn = void (*)(const Tensor& out, const Tensor& in, bool log);
HG_DECLARE_STUB(softmax_stub, SoftmaxFn);

// grad_in from grad_out and the forward's output y, all contiguous [outer, n, inner], one dtype:
// softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g).
using SoftmaxBackwardFn = void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y, bool log);
HG_DECLARE_STUB(softmax_backward_stub, SoftmaxBackwardFn);

}  // namespace hg
