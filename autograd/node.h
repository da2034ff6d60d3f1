// An autograd node: one recorded op, with edges to where its inputs' gradients go, the
// backward formula, and the autocast state its forward ran under.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "framework/autocast_state.h"
#include "framework/backward.h"

namespace hg {
struct OpDef;  // framework/op.h
}

namespace hg::autograd {

class Node;

// Where one input's gradient goes: another node's output slot, or a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;          // producer of the input (null for leaves / no grad)
  uint32_t output_nr = 0;              // which output of `node`
  std::shared_ptr<AutogradMeta> leaf;  // set for leaves that require grad
  Shape shape;                         // the input's shape, to undo broadcasting
  Dtype dtype = kFloat32;              // the input's dtype: each gradient arrives in it
  Device device;
  bool active() const { return node != nullptr || leaf != nullptr; }
};

class Node {
 public:
  // What each output looked like, so missing output gradients can be filled with zeros.
  struct OutputMeta {
    Shape shape;
    Dtype dtype;
    Device device;
  };
  // `op`: the public op whose backward this is, or null (a custom Function, a test's node).
  Node(std::string name, std::vector<Edge> edges, BackwardFn backward, std::vector<OutputMeta> outputs,
       AutocastState autocast, const OpDef* op = nullptr);
  // Frees the graph behind this node without recursion (see node.cpp).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  // The op's definition, whose traits (OpTraits) the engine reads; null for a custom Function.
  const OpDef* op() const { return op_; }
  const std::vector<Edge>& next_edges() const { return edges_; }
  size_t num_outputs() const { return outputs_.size(); }
  const OutputMeta& output(size_t i) const { return outputs_[i]; }
  // The autocast state that was active when the forward ran; backward runs under it.
  const AutocastState& autocast_state() const { return autocast_; }
  bool released() const { return !backward_; }

  // Runs the formula; frees it (and the tensors it saved) unless retain_graph.
  TensorList apply(const TensorList& grad_outputs, bool retain_graph);

  // The outputs' autograd slots (weak: the node must not keep its outputs alive), so the engine
  // can store the gradient of outputs that asked for retain_grad().
  void add_output_meta(std::weak_ptr<AutogradMeta> meta) { output_metas_.push_back(std::move(meta)); }
  const std::vector<std::weak_ptr<AutogradMeta>>& output_metas() const { return output_metas_; }

  // Gradient hooks on output `slot` (Tensor::register_hook on a non-leaf): run in registration
  // order on the gradient that reached the slot, each may replace it.
  uint64_t add_tensor_hook(uint32_t slot, GradHook fn);
  void remove_tensor_hook(uint64_t id);
  Tensor run_tensor_hooks(uint32_t slot, Tensor grad) const;
  bool has_tensor_hooks() const { return !tensor_hooks_.empty(); }

 private:
  const OpDef* op_;
  std::string name_;
  std::vector<Edge> edges_;
  BackwardFn backward_;
  std::vector<OutputMeta> outputs_;
  AutocastState autocast_;
  std::vector<std::weak_ptr<AutogradMeta>> output_metas_;
  struct TensorHook {
    uint64_t id;
    uint32_t slot;
    GradHook fn;
  };
  std::vector<TensorHook> tensor_hooks_;
};

// Runs hooks (id, fn) on a gradient in order; a defined result replaces it. A hook that changes the
// gradient's dtype, device or shape is refused, naming it (as PyTorch does).
Tensor run_grad_hooks(const std::vector<std::pair<uint64_t, GradHook>>& hooks, Tensor grad, const std::string& where);

// The edge for a tensor used as an input of a new node.
Edge edge_for(const Tensor& t);

}  // namespace hg::autograd
