#include "autograd/engine.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg::autograd {

namespace {

// A gradient arriving at an input: same shape (broadcast undone), dtype and device as it.
Tensor conform(Tensor g, const Edge& e) {
  if (g.shape() != e.shape) {
    HG_CHECK(numel_of(e.shape) == 0 || g.dim() >= static_cast<int64_t>(e.shape.size()), "backward",
             "gradient of shape {} cannot be reduced to the input's shape {}", g.shape(), e.shape);
    g = sum_to(g, e.shape);
  }
  if (g.dtype() != e.dtype || g.device() != e.device) g = to(g, e.device, e.dtype);
  return g;
}

Tensor accumulate(const Tensor& have, const Tensor& add) { return have.defined() ? have + add : add; }

// Restores the thread's autocast state when a node's replay ends (also on exceptions).
class AutocastReplay {
 public:
  explicit AutocastReplay(const AutocastState& s) : saved_(autocast_state()) { autocast_state() = s; }
  ~AutocastReplay() { autocast_state() = saved_; }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  AutocastState saved_;
};

struct GraphTask {
  bool retain_graph = false;
  bool create_graph = false;
  bool accumulate_into_leaves = true;
  // For grad(): where each requested input's gradient is captured.
  std::unordered_map<const AutogradMeta*, size_t> leaf_targets;
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> node_targets;
  TensorList captured;
};

// Whether `g` is a tensor only the engine can see: this handle is the only one to its TensorImpl,
// no other TensorImpl views its storage (no alias, no view, no saved copy, nothing the user
// passed in or will be handed), and it is a dense tensor (contiguous, or channels-last as a
// channels-last model's weight gradients) filling its whole storage.
bool engine_owns(const Tensor& g) {
  return g.use_count() == 1 && g.storage().use_count() == 1 && g.autograd_meta() == nullptr &&
         internal::owns_whole_storage(g);
}

// have + add for a sum the engine is building (a leaf's or a node input's): added in place when
// the engine alone holds `have` (nobody can see the change) and nothing is recorded, as
// PyTorch's input buffers do; a GPT-2 step's tied embedding gradient is 51 MB in float32, and a
// fresh sum cost an allocation and a third pass over it.
Tensor accumulate_owned(Tensor& have, Tensor add, bool create_graph) {
  if (!have.defined()) return add;
  if (!create_graph && engine_owns(have) && have.dtype() == add.dtype() && have.device() == add.device() &&
      have.shape() == add.shape() && add.storage() != have.storage()) {
    have.add_(add);
    return std::move(have);
  }
  return have + add;
}

// A leaf's gradients for this backward are summed first (PyTorch's AccumulateGrad): its hooks see
// the total once, and its post-accumulate-grad hooks run once, after the last contribution.
struct LeafState {
  std::shared_ptr<AutogradMeta> meta;
  int pending = 0;  // edges into the leaf not yet processed
  Tensor sum;
};

// The shape, dtype and device of a gradient, to tell whether a hook changed them.
struct GradLayout {
  bool defined = false;
  Shape shape;
  Dtype dtype = kFloat32;
  Device device;
  explicit GradLayout(const Tensor& g) : defined(g.defined()) {
    if (!defined) return;
    shape = g.shape();
    dtype = g.dtype();
    device = g.device();
  }
};

// A post-accumulate-grad hook may clear .grad (an optimizer step in backward does), but one that
// leaves a gradient of another dtype, device or shape is refused, as tensor hooks are.
void check_post_hook(const GradLayout& was, const Tensor& now, size_t index, size_t count) {
  if (!was.defined || !now.defined()) return;
  HG_CHECK(now.dtype() == was.dtype, "hook",
           "post-accumulate-grad hook {} of {} on a leaf changed the type of its .grad (was {}, got {}); a hook must "
           "keep the gradient's dtype, device and shape",
           index + 1, count, was.dtype, now.dtype());
  HG_CHECK(now.device() == was.device, "hook",
           "post-accumulate-grad hook {} of {} on a leaf moved its .grad to another device (was {}, got {}); a hook "
           "must keep the gradient's dtype, device and shape",
           index + 1, count, was.device, now.device());
  HG_CHECK(now.shape() == was.shape, "hook",
           "post-accumulate-grad hook {} of {} on a leaf changed the shape of its .grad (was {}, got {}); a hook must "
           "keep the gradient's dtype, device and shape",
           index + 1, count, was.shape, now.shape());
}

// Runs once all of this backward's gradients for the leaf arrived: hooks, capture, accumulation
// (a summed gradient the engine alone holds becomes .grad without a copy), post-accumulate hooks.
// Backward passes on other threads may reach the same leaf: its lock is held while .grad is
// read and written and while the post-accumulate hooks run (one uncontended lock per leaf and
// backward); the tensor hooks run outside it, on a copy of the list (as PyTorch's pre-hooks).
void finish_leaf(GraphTask& task, LeafState& leaf) {
  if (!leaf.sum.defined()) return;
  AutogradMeta& meta = *leaf.meta;
  Tensor g = std::move(leaf.sum);
  std::unique_lock lock(meta.lock);
  if (!meta.grad_hooks.empty()) {
    const std::vector<std::pair<uint64_t, GradHook>> hooks = meta.grad_hooks;
    lock.unlock();
    g = run_grad_hooks(hooks, std::move(g), "a leaf");
  }
  if (auto it = task.leaf_targets.find(&meta); it != task.leaf_targets.end()) {
    task.captured[it->second] = accumulate(task.captured[it->second], g);
  }
  if (!task.accumulate_into_leaves) return;
  if (!lock.owns_lock()) lock.lock();
  // The stored grad never aliases another gradient, a view or a tensor the user holds: it is
  // either g when nobody else can see it, or a fresh tensor (clone and + both allocate). Under
  // create_graph both are recorded, so .grad has a history (never an in-place add).
  if (meta.grad.defined()) {
    meta.grad = meta.grad + g;
  } else {
    meta.grad = engine_owns(g) ? std::move(g) : clone(g);
  }
  if (meta.post_accumulate_grad_hooks.empty()) return;
  const auto hooks = meta.post_accumulate_grad_hooks;  // a copy: a hook may remove itself
  for (size_t i = 0; i < hooks.size(); ++i) {
    const GradLayout was(meta.grad);
    hooks[i].second();
    check_post_hook(was, meta.grad, i, hooks.size());
  }
}

// create_graph needs the formulas to be differentiable: an op whose backward runs a raw kernel
// refuses here rather than hand back gradients without history.
void check_double_backward(const Node& node) {
  HG_CHECK(node.op() == nullptr || node.op()->double_differentiable, node.name(),
           "double backward is not supported (create_graph=true needs its backward formula to be differentiable; "
           "docs/GUIDE.md lists the ops that refuse)");
}

void run(GraphTask& task, const TensorList& roots, const TensorList& root_grads) {
  HG_CHECK(root_grads.empty() || root_grads.size() == roots.size(), "backward", "got {} gradients for {} tensors",
           root_grads.size(), roots.size());
  // Everything the engine computes (sums, casts, hooks, formulas) is recorded only under create_graph.
  GradModeGuard grad_mode(task.create_graph);
  std::vector<Edge> root_edges;
  TensorList initial;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    HG_CHECK(r.defined() && r.requires_grad(), "backward",
             "tensor {} does not require grad and has no grad_fn (did you forget requires_grad_(), or run the "
             "forward under NoGradGuard?)",
             i);
    Tensor g = root_grads.empty() ? Tensor() : root_grads[i];
    if (!g.defined()) {
      HG_CHECK(r.numel() == 1, "backward",
               "grad can be created implicitly only for scalar outputs; tensor {} has shape {}, so pass a "
               "gradient of that shape",
               i, r.shape());
      g = ones_like(r.detach());
    } else {
      HG_CHECK(g.shape() == r.shape(), "backward", "gradient shape {} does not match tensor shape {}", g.shape(),
               r.shape());
    }
    root_edges.push_back(edge_for(r));
    initial.push_back(g);
  }

  // Count, for each node reachable from the roots, how many edges lead into it, and for each
  // leaf how many gradients it will receive. `nodes` also keeps them alive while the task runs,
  // even if the user drops the outputs.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> nodes;
  std::unordered_map<const AutogradMeta*, LeafState> leaves;
  std::vector<Node*> stack;
  auto count = [&](const Edge& e) {
    if (e.node) {
      if (nodes.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    } else if (e.leaf) {
      LeafState& l = leaves[e.leaf.get()];
      l.meta = e.leaf;
      ++l.pending;
    }
  };
  for (const Edge& e : root_edges) count(e);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (e.node) ++deps[e.node.get()];
      count(e);
    }
  }
  auto leaf_arrives = [&](const Edge& e, Tensor g) {
    BackwardPassGuard in_backward;
    LeafState& l = leaves.at(e.leaf.get());
    if (g.defined()) l.sum = accumulate_owned(l.sum, std::move(g), task.create_graph);
    if (--l.pending == 0) finish_leaf(task, l);
  };

  std::unordered_map<Node*, TensorList> buffers;
  // Whether edge e of the node about to run may carry its gradient widened (see
  // widened_gradient_wanted): e leads into a cast's backward from float32 to e's 16-bit dtype on
  // the same device, this is the only gradient that cast will get, and nothing looks at it there
  // (tensor hooks, retain_grad, grad()'s capture). Never under create_graph: the recorded
  // formulas then keep every cast.
  auto may_widen = [&](const Edge& e) {
    if (task.create_graph || !e.node || !is_reduced_float(e.dtype)) return false;
    Node* cast = e.node.get();
    if (!cast->op() || !cast->op()->dtype_cast || cast->num_outputs() != 1 || cast->next_edges().size() != 1)
      return false;
    const Edge& source = cast->next_edges()[0];
    if (!source.active() || source.dtype != kFloat32 || source.device != e.device) return false;
    if (deps.at(cast) != 1 || buffers.count(cast) != 0 || cast->has_tensor_hooks()) return false;
    if (task.node_targets.count(cast) != 0) return false;
    for (const auto& weak : cast->output_metas())
      if (auto meta = weak.lock(); meta && meta->retains_grad) return false;
    return true;
  };
  auto add_to_buffer = [&](const Edge& e, const Tensor& g) {
    TensorList& buf = buffers[e.node.get()];
    if (buf.empty()) buf.resize(e.node->num_outputs());
    buf[e.output_nr] = accumulate_owned(buf[e.output_nr], g, task.create_graph);
  };
  for (size_t i = 0; i < root_edges.size(); ++i) {
    const Edge& e = root_edges[i];
    if (e.node) {
      add_to_buffer(e, initial[i]);
    } else if (e.leaf) {
      leaf_arrives(e, conform(std::move(initial[i]), e));
    }
  }

  std::vector<Node*> ready;
  for (const auto& entry : nodes)
    if (deps[entry.first] == 0) ready.push_back(entry.first);

  while (!ready.empty()) {
    Node* node = ready.back();
    ready.pop_back();
    TensorList grads_in = std::move(buffers[node]);
    buffers.erase(node);
    grads_in.resize(node->num_outputs());

    // The gradient of each output is final here: its hooks, then retain_grad, then grad()'s capture.
    const auto& metas = node->output_metas();
    for (size_t slot = 0; slot < grads_in.size(); ++slot) {
      if (!grads_in[slot].defined()) continue;
      grads_in[slot] = node->run_tensor_hooks(static_cast<uint32_t>(slot), std::move(grads_in[slot]));
      if (slot >= metas.size()) continue;
      if (auto meta = metas[slot].lock(); meta && meta->retains_grad) {
        // A copy (as PyTorch's retain_grad): the incoming gradient goes on to the node's backward,
        // which may pass it, or a view of it, to another retained or leaf gradient.
        std::lock_guard lock(meta->lock);
        meta->grad = meta->grad.defined() ? meta->grad + grads_in[slot] : clone(grads_in[slot]);
      }
    }
    if (auto it = task.node_targets.find(node); it != task.node_targets.end()) {
      for (auto [slot, index] : it->second) task.captured[index] = accumulate(task.captured[index], grads_in[slot]);
    }
    const bool any = std::any_of(grads_in.begin(), grads_in.end(), [](const Tensor& t) { return t.defined(); });

    TensorList grads_out;
    std::vector<bool> widened(node->next_edges().size(), false);
    if (any) {
      for (size_t i = 0; i < grads_in.size(); ++i) {
        if (!grads_in[i].defined()) {
          const auto& m = node->output(i);
          grads_in[i] = zeros(m.shape, TensorOptions(m.dtype).device(m.device));
        }
      }
      if (task.create_graph) check_double_backward(*node);
      if (node->op() && node->op()->writes_widened_gradients)
        for (size_t i = 0; i < node->next_edges().size(); ++i) widened[i] = may_widen(node->next_edges()[i]);
      AutocastReplay replay(node->autocast_state());
      BackwardPassGuard in_backward;
      CurrentBackwardNodeGuard current(nodes.at(node));
      WidenedGradientGuard widen(widened);
      grads_out = node->apply(grads_in, task.retain_graph);
      // Dropped now: a formula that hands an incoming gradient on unchanged (a cast to the dtype
      // it already has) leaves grads_out its only holder, so a leaf can keep it without a copy.
      grads_in.clear();
    }

    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.active()) continue;
      Tensor g;
      if (any && grads_out[i].defined()) {
        BackwardPassGuard in_backward;
        // Moved out of grads_out: a gradient the node returned once and nobody else holds can
        // then be stored into a leaf as it is. A granted widened gradient goes on as float32.
        const bool kept_wide = widened[i] && grads_out[i].dtype() == kFloat32 && grads_out[i].shape() == e.shape &&
                               grads_out[i].device() == e.device;
        g = kept_wide ? std::move(grads_out[i]) : conform(std::move(grads_out[i]), e);
      }
      if (!e.node) {
        leaf_arrives(e, std::move(g));
        continue;
      }
      if (g.defined()) add_to_buffer(e, g);
      if (--deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
}

}  // namespace

void backward(const TensorList& roots, const TensorList& grads, std::optional<bool> retain_graph, bool create_graph) {
  GraphTask task;
  task.retain_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  run(task, roots, grads);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  GraphTask task;
  task.retain_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.accumulate_into_leaves = false;
  task.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    HG_CHECK(t.defined() && t.requires_grad(), "grad", "input {} does not require grad", i);
    if (t.is_leaf()) {
      task.leaf_targets[t.impl()->autograd.get()] = i;
    } else {
      task.node_targets[t.grad_fn().get()].emplace_back(t.autograd_meta()->output_nr, i);
    }
  }
  run(task, outputs, grad_outputs);
  GradModeGuard grad_mode(create_graph);
  for (size_t i = 0; i < inputs.size(); ++i) {
    HG_CHECK(allow_unused || task.captured[i].defined(), "grad",
             "input {} was not used to compute the outputs; pass allow_unused=true to get an undefined "
             "gradient for it",
             i);
    if (task.captured[i].defined() && task.captured[i].shape() != inputs[i].shape()) {
      task.captured[i] = sum_to(task.captured[i], inputs[i].shape());
    }
  }
  return task.captured;
}

}  // namespace hg::autograd
