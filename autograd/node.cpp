#include "autograd/node.h"

#include <atomic>

#include "framework/op.h"
#include "framework/view_history.h"

namespace hg::autograd {

Node::Node(std::string name, std::vector<Edge> edges, BackwardFn backward, std::vector<OutputMeta> outputs,
           AutocastState autocast, const OpDef* op)
    : op_(op),
      name_(std::move(name)),
      edges_(std::move(edges)),
      backward_(std::move(backward)),
      outputs_(std::move(outputs)),
      autocast_(autocast) {}

// A chain of a million ops (y = y * 1.0 in a loop) is freed from its last node: left to the
// members' destructors, each node would free the next one inside its own destructor, a stack frame
// or more per node, and overflow the stack. As PyTorch's deleteNode, the nodes this one points to
// go onto a worklist instead; one the worklist holds the last reference to gives up its own edges
// there before it is freed, so its destructor has nothing left to recurse into.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  const auto take_edges = [&pending](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.node) pending.push_back(std::move(e.node));
  };
  take_edges(edges_);
  // The saved tensors may hold the same nodes (an input's grad_fn): dropped while the worklist still
  // holds those, so they never free a node from here.
  backward_ = nullptr;
  while (!pending.empty()) {
    std::shared_ptr<Node> next = std::move(pending.back());
    pending.pop_back();
    if (next.use_count() == 1) {
      take_edges(next->edges_);
      next->backward_ = nullptr;
    }
  }
}

TensorList Node::apply(const TensorList& grad_outputs, bool retain_graph) {
  HG_CHECK(backward_ != nullptr, name_,
           "trying to run backward through the graph a second time (its saved tensors were freed after the "
           "first backward); pass retain_graph=true to the first backward() if you need to do this");
  TensorList grads = backward_(grad_outputs);
  if (!retain_graph) backward_ = nullptr;
  HG_CHECK(grads.size() == edges_.size(), name_, "backward returned {} gradients for {} inputs", grads.size(),
           edges_.size());
  return grads;
}

uint64_t Node::add_tensor_hook(uint32_t slot, GradHook fn) {
  static std::atomic<uint64_t> next_id{0};  // hooks are registered from any thread
  const uint64_t id = ++next_id;
  tensor_hooks_.push_back({id, slot, std::move(fn)});
  return id;
}

void Node::remove_tensor_hook(uint64_t id) {
  std::erase_if(tensor_hooks_, [id](const TensorHook& h) { return h.id == id; });
}

Tensor Node::run_tensor_hooks(uint32_t slot, Tensor grad) const {
  std::vector<std::pair<uint64_t, GradHook>> hooks;  // a copy: a hook may remove itself
  for (const TensorHook& h : tensor_hooks_)
    if (h.slot == slot) hooks.emplace_back(h.id, h.fn);
  return hooks.empty() ? grad : run_grad_hooks(hooks, std::move(grad), "an output of " + name_);
}

Tensor run_grad_hooks(const std::vector<std::pair<uint64_t, GradHook>>& hooks, Tensor grad, const std::string& where) {
  for (size_t i = 0; i < hooks.size(); ++i) {
    Tensor r = hooks[i].second(grad);
    if (!r.defined()) continue;
    // The engine hands the result on as the tensor's gradient: another dtype or device would
    // reach .grad (or the next formula) unconverted.
    HG_CHECK(r.dtype() == grad.dtype(), "hook",
             "gradient hook {} of {} on {} changed the type of the gradient (was {}, got {}); a hook must "
             "return a gradient of the same dtype, device and shape",
             i + 1, hooks.size(), where, grad.dtype(), r.dtype());
    HG_CHECK(r.device() == grad.device(), "hook",
             "gradient hook {} of {} on {} moved the gradient to another device (was {}, got {}); a hook must "
             "return a gradient of the same dtype, device and shape",
             i + 1, hooks.size(), where, grad.device(), r.device());
    HG_CHECK(r.shape() == grad.shape(), "hook",
             "gradient hook {} of {} on {} returned shape {} for a gradient of shape {}; a hook must return a "
             "gradient of the same dtype, device and shape",
             i + 1, hooks.size(), where, r.shape(), grad.shape());
    grad = std::move(r);
  }
  return grad;
}

Edge edge_for(const Tensor& t) {
  Edge e;
  if (!t.defined()) return e;
  e.shape = t.shape();
  e.dtype = t.dtype();
  e.device = t.device();
  if (!t.requires_grad()) return e;
  refresh_view_history(t);
  AutogradMeta& meta = t.ensure_autograd_meta();
  if (meta.grad_fn) {
    e.node = meta.grad_fn;
    e.output_nr = meta.output_nr;
  } else {
    // The leaf's meta is shared with every Tensor handle of it.
    const TensorImpl* impl = t.impl();
    e.leaf = impl->autograd;
  }
  return e;
}

}  // namespace hg::autograd
