#include "framework/view_history.h"

#include <vector>

#include "framework/grad_mode.h"
#include "framework/memory_overlap.h"
#include "framework/op.h"

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

namespace {
// The replay of a view of a view: its own step after its parent's replay. It holds the parent's
// ViewInfo rather than a copy of the parent's replay, so making a chain of n views costs O(n)
// (copying the nested closures cost O(n^2)), and it replays and frees the chain with loops, so a
// chain of any length neither recurses through the stack nor overflows it (as autograd's Node).
struct ChainedReplay {
  mutable std::shared_ptr<const ViewInfo> parent;  // mutable: unlinked while being freed
  std::function<Tensor(const Tensor&)> step;

  ChainedReplay(std::shared_ptr<const ViewInfo> p, std::function<Tensor(const Tensor&)> s)
      : parent(std::move(p)), step(std::move(s)) {}
  ChainedReplay(const ChainedReplay&) = default;
  ChainedReplay(ChainedReplay&&) = default;

  Tensor operator()(const Tensor& base) const {
    std::vector<const ChainedReplay*> links{this};
    const std::function<Tensor(const Tensor&)>* root = nullptr;
    for (const ViewInfo* p = parent.get(); p;) {
      if (const auto* link = p->replay.target<ChainedReplay>()) {
        links.push_back(link);
        p = link->parent.get();
      } else {
        root = &p->replay;
        break;
      }
    }
    Tensor t = root ? (*root)(base) : base;
    for (auto it = links.rbegin(); it != links.rend(); ++it) t = (*it)->step(t);
    return t;
  }

  ~ChainedReplay() {
    std::shared_ptr<const ViewInfo> next = std::move(parent);
    while (next && next.use_count() == 1) {
      const auto* link = next->replay.target<ChainedReplay>();
      if (!link) break;
      std::shared_ptr<const ViewInfo> after = std::move(link->parent);
      next = std::move(after);  // frees the old one, whose link no longer holds anything
    }
  }
};
}  // namespace

void mark_view(Tensor& out, const Tensor& x, std::function<Tensor(const Tensor&)> step) {
  if (!GradMode::is_enabled() || out.storage() != x.storage()) return;
  auto info = std::make_shared<ViewInfo>();
  if (const auto& parent = x.impl()->view) {
    info->base = parent->base;
    info->replay = ChainedReplay(parent, std::move(step));
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
    autograd_hooks().attach(&call.op(), call.name(), call.inputs(), {&self}, std::move(backward));
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
  autograd_hooks().attach(&call.op(), call.name(), inputs, {&base}, std::move(through_base));
  remake_view_history(self);
}

}  // namespace hg
