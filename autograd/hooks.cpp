// Installs the autograd layer into the tensor core's hooks when the library loads.
#include "autograd/engine.h"
#include "framework/op.h"

namespace hg::autograd {
namespace {

class EngineHooks final : public AutogradHooks {
 public:
  void attach(const OpDef* op, std::string_view name, const TensorList& inputs, const std::vector<Tensor*>& outputs,
              BackwardFn backward) override {
    std::vector<Edge> edges;
    edges.reserve(inputs.size());
    for (const Tensor& t : inputs) edges.push_back(edge_for(t));
    std::vector<Node::OutputMeta> metas;
    for (const Tensor* t : outputs) metas.push_back({t->shape(), t->dtype(), t->device()});
    auto node = std::make_shared<Node>(std::string(name), std::move(edges), std::move(backward), std::move(metas),
                                       hg::autocast_state(), op);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& out = *outputs[i];
      if (!is_floating(out.dtype())) {  // integer outputs (indices) carry no gradient
        node->add_output_meta({});
        continue;
      }
      AutogradMeta& meta = out.ensure_autograd_meta();
      node->add_output_meta(out.impl()->autograd);
      meta.grad_fn = node;
      meta.output_nr = static_cast<uint32_t>(i);
      meta.requires_grad = true;
    }
  }

  void backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph) override {
    autograd::backward(roots, grads, retain_graph, create_graph);
  }

  RemovableHandle register_node_hook(const Tensor& t, GradHook fn) override {
    const std::shared_ptr<Node>& node = t.grad_fn();
    const uint64_t id = node->add_tensor_hook(t.autograd_meta()->output_nr, std::move(fn));
    return RemovableHandle([weak = std::weak_ptr<Node>(node), id] {
      if (auto n = weak.lock()) n->remove_tensor_hook(id);
    });
  }
};

EngineHooks g_hooks;
[[maybe_unused]] const bool g_installed = (set_autograd_hooks(&g_hooks), true);

}  // namespace
}  // namespace hg::autograd
