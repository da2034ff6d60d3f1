// add_layer_norm: a transformer block's residual add and the LayerNorm after it as one op that
// returns both (the sum goes on as the residual stream, the normalised values into the next
// linear). Under autocast it writes the normalised values in the region's dtype, where the
// linear that reads them would cast them anyway (layer_norm alone writes float32 there).
// Explicit, never a pattern match.
#pragma once

#include "framework/shape.h"
#include "framework/tensor.h"

namespace hg {

struct AddLayerNorm {
  Tensor sum;         // x + residual, in their promoted dtype (the residual stream)
  Tensor normalized;  // layer_norm(sum, ...); in the autocast dtype inside a region on sum's device
};

// x and residual of one shape ending in normalized_shape; weight and bias (optional) of
// normalized_shape, sum's dtype or float32. Statistics in float32 (float64 for float64), as
// layer_norm. Values and gradients are those of sum = x + residual, layer_norm(sum, ...) and, in
// a region, the cast of the result to the region's dtype. Its backward is not differentiable again.
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                            const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace hg
