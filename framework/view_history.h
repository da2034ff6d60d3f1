// Views and in-place ops under autograd: view ops mark their outputs as views of a base, a
// view's history is remade when its storage was written since, and in-place ops check and
// record themselves here (on a view, through its base, as PyTorch's CopySlices).
#pragma once

#include <functional>
#include <string_view>

#include "framework/op.h"

namespace hg {

// Called by a view op on its output `out` (an alias of `x`): with grad mode on, records that
// out is a view of x's base and how to remake it, `step` making the same view of a tensor
// shaped like x. Stamps out's history as current.
void mark_view(Tensor& out, const Tensor& x, std::function<Tensor(const Tensor&)> step);

// Whether t is a view whose base requires grad (such a view requires grad, as in PyTorch).
bool view_of_tensor_requiring_grad(const Tensor& t);

// Remakes a view's grad_fn from its base's current history when the storage was written since
// the history was set (an in-place op on the base or on another view of it), so gradients
// through the view see the writes. Does nothing for a tensor that is not such a view.
void refresh_view_history(const Tensor& t);

// Run by every in-place op before it writes: a tensor whose elements share memory (an expanded
// view) is never written, nor one that overlaps an input in `reads` other than element for
// element (framework/memory_overlap.h); and with grad mode on neither is a leaf that requires
// grad, or a view of one ("[op] a leaf tensor that requires grad ...").
void check_in_place(const Tensor& self, std::string_view op, const TensorList& reads = {});

// Ends an in-place op on `self` (the call's input 0; the other inputs follow): records the event
// and, when grad is needed, the node whose formula maps the gradient of self's new value to the
// gradients of self's old value and the other inputs. On a view the node goes on the base.
void finish_in_place(OpCall& call, Tensor& self, BackwardFn backward);

}  // namespace hg
