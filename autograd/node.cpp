#include "autograd/node.h"

namespace hg::autograd {

Node::Node(std::string name, std::vector<Edge> edges, BackwardFn backward, std::vector<OutputMeta> outputs,
           AutocastState autocast)
    : name_(std::move(name)),
      edges_(std::move(edges)),
      backward_(std::move(backward)),
      outputs_(std::move(outputs)),
      autocast_(autocast) {}

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

Edge edge_for(const Tensor& t) {
  Edge e;
  if (!t.defined()) return e;
  e.shape = t.shape();
  e.dtype = t.dtype();
  e.device = t.device();
  if (!t.requires_grad()) return e;
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
