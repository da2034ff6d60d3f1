#include "framework/view_history.h"

#include "framework/grad_mode.h"
#include "framework/memory_overlap.h"

namespace hg {

namespace {
bool requires_grad_meta(const TensorImpl& impl) {
  return impl.autograd && (impl.autograd->requires_grad || impl.autograd->grad_fn);
}
bool is_leaf_requiring_grad(const TensorImpl& impl) {
  return impl.autograd && impl.autograd->requires_grad && !impl.autograd->grad_fn;
}

// Sets t's history to the view replayed on its base now (grad mode on, so the view ops record).
void remake_view_history(const Tensor& t) {
  const ViewInfo& view = *t.impl()->view;
  GradModeGuard grad_on(true);
  const Tensor fresh = view.replay(Tensor(view.base));
  AutogradMeta& meta = t.ensure_autograd_meta();
  const AutogradMeta* made = fresh.autograd_meta();
  meta.grad_fn = made ? made->grad_fn : nullptr;
  meta.output_nr = made ? made->output_nr : 0;
  meta.requires_grad = true;
  meta.view_version = t.version();
}
}  // namespace

void mark_view(Tensor& out, const Tensor& x, std::function<Tensor(const Tensor&)> step) {
  if (!GradMode::is_enabled() || out.storage() != x.storage()) return;
  auto info = std::make_shared<ViewInfo>();
  if (const auto& parent = x.impl()->view) {
    info->base = parent->base;
    info->replay = [prev = parent->replay, step = std::move(step)](const Tensor& b) { return step(prev(b)); };
  } else {
    info->base = x.impl_ptr();
    info->replay = std::move(step);
  }
  out.impl_ptr()->view = std::move(info);
  if (AutogradMeta* meta = out.impl_ptr()->autograd.get()) meta->view_version = out.version();
}

bool view_of_tensor_requiring_grad(const Tensor& t) {
  const auto& view = t.impl()->view;
  return view && requires_grad_meta(*view->base);
}

void refresh_view_history(const Tensor& t) {
  if (!t.defined() || !view_of_tensor_requiring_grad(t)) return;
  const AutogradMeta* meta = t.autograd_meta();
  if (meta && meta->grad_fn && meta->view_version == t.version()) return;
  remake_view_history(t);
}

void check_in_place(const Tensor& self, std::string_view op, const TensorList& reads) {
  if (!self.defined()) return;
  // As PyTorch: a write into memory that several of self's elements share, or one that reads an
  // input overlapping self other than element for element, depends on the kernel's order.
  assert_no_internal_overlap(self, op);
  for (const Tensor& read : reads) assert_no_partial_overlap(self, read, op);
  if (!GradMode::is_enabled()) return;
  if (const auto& view = self.impl()->view) {
    HG_CHECK(!is_leaf_requiring_grad(*view->base), op,
             "a view of a leaf tensor that requires grad is being used in an in-place operation; write the leaf "
             "under hg::NoGradGuard, or clone it first");
  }
  HG_CHECK(!is_leaf_requiring_grad(*self.impl()), op,
           "a leaf tensor that requires grad is being used in an in-place operation; write it under "
           "hg::NoGradGuard (as optimizers do), or clone it first");
}

void finish_in_place(OpCall& call, Tensor& self, BackwardFn backward) {
  call.finish({&self});  // the recorder's event
  if (!backward || !call.needs_grad()) return;
  // The new value gets an autograd slot of its own (a copy: .grad, retain_grad and hooks stay),
  // so the node of the old value no longer reaches it: retain_grad keeps the new value's
  // gradient only, as in PyTorch.
  if (auto& meta = self.impl_ptr()->autograd; meta && meta->grad_fn) meta = std::make_shared<AutogradMeta>(*meta);
  const std::shared_ptr<const ViewInfo> view = self.impl()->view;
  if (!view) {
    // Input 0 (self's old value) is linked to self's old history before self moves on to the node.
    autograd_hooks().attach(call.name(), call.inputs(), {&self}, std::move(backward));
    return;
  }
  // On a view: the base's new value is its old one with the view's region passed through the op.
  // The gradient of the old base is the new base's gradient with that region replaced by the op's
  // gradient for self; the other inputs get the op's gradients of the region.
  Tensor base(view->base);
  TensorList inputs = call.inputs();
  inputs[0] = base;
  BackwardFn through_base = [replay = view->replay, op = std::move(backward)](const TensorList& g) -> TensorList {
    Tensor grad_base = g[0].clone();
    Tensor region = replay(grad_base);
    TensorList grads = op({region.clone()});
    if (grads[0].defined()) {
      region.copy_(grads[0]);
    } else {
      region.zero_();
    }
    grads[0] = grad_base;
    return grads;
  };
  autograd_hooks().attach(call.name(), inputs, {&base}, std::move(through_base));
  remake_view_history(self);
}

}  // namespace hg
