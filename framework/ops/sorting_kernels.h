// Kernel plumbing behind sorting.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/sorting.h"

namespace hg {

// Per row of a contiguous [rows, n] `in`: the first k elements of the row in stable sorted order
// (ascending, or descending; NaN largest) into values [rows, k] (in's dtype) and their positions
// into indices [rows, k] (int64), both contiguous.
using SortFn = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending);
HG_DECLARE_STUB(sort_stub, SortFn);

}  // namespace hg
