// Kernel plumbing behind norm_fused.h: add_layer_norm in one pass per row where a device has it
// (CUDA). Optional: without it the op runs the add and layer_norm's kernels. Internal.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/norm_fused.h"

namespace hg {

// x [rows, cols] (float32, bfloat16 or float16) and residual [rows, cols] float32, contiguous:
// sum = x + residual (float32), normalized = layer_norm(sum) with float32 weight and bias
// (optional, [cols]) rounded once into normalized's dtype (float32, bfloat16 or float16), mean
// and rstd [rows] float32, as layer_norm_stub writes them.
using AddLayerNormFn = void (*)(const Tensor& sum, const Tensor& normalized, const Tensor& mean, const Tensor& rstd,
                                const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                double eps);
HG_DECLARE_STUB(add_layer_norm_stub, AddLayerNormFn);

}  // namespace hg
