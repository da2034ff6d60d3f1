// The kernel of cross_entropy_fused_ where a backend has one pass for it (the CPU and CUDA): per
// row, the loss and, with write_grad, the gradient for an upstream gradient of 1 written over the
// row (1 / kept count for a mean, 1 otherwise). Optional: without it the op runs cross_entropy's
// forward and backward kernels, the second in place.
#pragma once

#include "framework/dispatch.h"
#include "framework/tensor.h"

namespace hg {

// logits [N, C] contiguous (read, and overwritten by the gradient when write_grad) of which the
// first `classes` columns are classes and the rest padding (gradient 0), target int64 [N];
// losses [N] and count (0-d int64: targets that are not ignore_index) in float32 or float64.
// Bad targets throw "[cross_entropy] ..." as cross_entropy's kernel does (on CUDA at the next host
// synchronisation, through the device error record).
using CrossEntropyFusedFn = void (*)(const Tensor& losses, const Tensor& count, const Tensor& logits,
                                     const Tensor& target, int64_t classes, int64_t ignore_index,
                                     double label_smoothing, bool mean, bool write_grad);
HG_DECLARE_STUB(cross_entropy_fused_stub, CrossEntropyFusedFn);

}  // namespace hg
