// The backward engine: runs nodes in dependency order from the roots, sums gradients per
// input, undoes broadcasting, casts each gradient to its tensor's dtype, and replays each
// node's recorded autocast state around its formula.
#pragma once

#include <optional>

#include "autograd/node.h"

namespace hg::autograd {

// Accumulates into leaves' .grad (what Tensor::backward does). retain_graph defaults to
// create_graph; create_graph records the backward formulas (run with grad mode on, under each
// node's autocast state), so the gradients have a grad_fn and can be differentiated again.
void backward(const TensorList& roots, const TensorList& grads = {}, std::optional<bool> retain_graph = std::nullopt,
              bool create_graph = false);

// Returns d(sum of outputs * grad_outputs)/d(inputs) without touching any .grad (libtorch's
// argument order). allow_unused=false throws when an input is not reachable from the outputs.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

}  // namespace hg::autograd
