// Kernel plumbing behind binary.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/binary.h"

namespace hg {

// out = a (op) b, all three of out's shape (inputs may be broadcast views); a and b share a
// dtype; out has that dtype, or bool for comparisons. `alpha` scales b for Add and Sub.
using BinaryFn = void (*)(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
HG_DECLARE_STUB(binary_stub, BinaryFn);

}  // namespace hg
