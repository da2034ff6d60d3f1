// Kernel plumbing behind triangular.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/triangular.h"

namespace hg {

// out [batch, rows, cols] = in where (j - i <= diagonal) for the lower triangle, (j - i >=
// diagonal) for the upper one, else 0; both contiguous, one dtype.
using TriangleFn = void (*)(const Tensor& out, const Tensor& in, int64_t diagonal, bool upper);
HG_DECLARE_STUB(triangle_stub, TriangleFn);

}  // namespace hg
