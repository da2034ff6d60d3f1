// The backward engine: runs nodes in dependency order from the roots, sums gradients per
// input, undoes broadcasting, casts each gradient to its tensor's dtype, and replays each
// node's recorded autocast state around its formula.
#pragma once

#include "autograd/node.h"

namespace hg::autograd {

// Accumulates into leaves' .grad (what Tensor::backward does).
void backward(const TensorList& roots, const TensorList& grads = {}, bool retain_graph = false);

// Returns d(sum of outputs * grad_outputs)/d(inputs) without touching any .grad.
// allow_unused=false throws when an input is not reachable from the outputs.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false);

}  // namespace hg::autograd
