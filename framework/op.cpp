#include "framework/op.h"

#include <algorithm>

#include "framework/autocast_state.h"
#include "framework/grad_mode.h"
#include "framework/view_history.h"

namespace hg {

namespace {
std::vector<const OpDef*>& registry() {
  static std::vector<const OpDef*> ops;
  return ops;
}
AutocastHook g_autocast_hook = nullptr;
OpOverrideHook g_op_override_hook = nullptr;
AutogradHooks* g_autograd_hooks = nullptr;
thread_local std::vector<OpRecorder*> t_recorders;
thread_local bool t_in_backward = false;
thread_local int t_op_depth = 0;
thread_local bool t_grad_mode = true;
thread_local AutocastState t_autocast;
thread_local const OpDef* t_current_op = nullptr;  // the outermost OpCall running on this thread
thread_local std::shared_ptr<autograd::Node> t_backward_node;
}  // namespace

bool GradMode::is_enabled() { return t_grad_mode; }
void GradMode::set_enabled(bool enabled) { t_grad_mode = enabled; }
AutocastState& autocast_state() { return t_autocast; }

OpDef::OpDef(const char* n, bool diff, bool double_diff) : OpDef(n, OpTraits{diff, double_diff}) {}

OpDef::OpDef(const char* n, OpTraits traits)
    : name(n),
      differentiable(traits.differentiable),
      double_differentiable(traits.double_differentiable),
      dtype_cast(traits.dtype_cast),
      writes_widened_gradients(traits.writes_widened_gradients) {
  registry().push_back(this);
}

const std::vector<const OpDef*>& op_registry() { return registry(); }

const OpDef* find_op(std::string_view name) {
  for (const OpDef* op : registry())
    if (name == op->name) return op;
  return nullptr;
}

void set_autocast_hook(AutocastHook hook) { g_autocast_hook = hook; }
void set_autograd_hooks(AutogradHooks* hooks) { g_autograd_hooks = hooks; }
void set_op_override_hook(OpOverrideHook hook) { g_op_override_hook = hook; }
Tensor op_override(const OpDef& op, const TensorList& inputs) {
  if (g_op_override_hook == nullptr || t_op_depth != 0 || t_in_backward || !t_autocast.any_enabled()) return Tensor();
  return g_op_override_hook(op, inputs);
}
AutogradHooks& autograd_hooks() {
  HG_CHECK(g_autograd_hooks != nullptr, "autograd", "the autograd layer is not linked into this program");
  return *g_autograd_hooks;
}

OpRecorder::OpRecorder() { t_recorders.push_back(this); }
OpRecorder::~OpRecorder() { std::erase(t_recorders, this); }
std::vector<OpRecorder::Total> OpRecorder::totals() const {
  std::vector<Total> out;
  for (const OpEvent& e : events_) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const Total& t) { return t.name == e.name && t.backward == e.backward; });
    if (it == out.end()) it = out.insert(out.end(), Total{e.name, e.backward, 0, 0});
    ++it->calls;
    it->micros += e.micros;
  }
  std::stable_sort(out.begin(), out.end(), [](const Total& a, const Total& b) { return a.micros > b.micros; });
  return out;
}

size_t OpRecorder::count(std::string_view name, std::optional<bool> backward) const {
  return static_cast<size_t>(std::count_if(events_.begin(), events_.end(), [&](const OpEvent& e) {
    return e.name == name && (!backward || e.backward == *backward);
  }));
}

bool in_backward_pass() { return t_in_backward; }
BackwardPassGuard::BackwardPassGuard() : prev_(t_in_backward) { t_in_backward = true; }
BackwardPassGuard::~BackwardPassGuard() { t_in_backward = prev_; }

OpCall::OpCall(const OpDef& op, TensorList inputs) : op_(op), inputs_(std::move(inputs)) {
  // A view whose storage was written since its history was set gets its history remade first,
  // so the node this op records (and what it saves) sees the writes.
  for (const Tensor& t : inputs_)
    if (t.defined() && t.impl()->view) refresh_view_history(t);
  if (g_autocast_hook && t_op_depth == 0 && t_autocast.any_enabled()) {
    AutocastResult r = g_autocast_hook(op_, std::move(inputs_));
    inputs_ = std::move(r.inputs);
    output_dtype_ = r.output_dtype;
  }
  if (t_op_depth++ == 0) t_current_op = &op_;
  if (!t_recorders.empty()) start_ = std::chrono::steady_clock::now();
}

OpCall::~OpCall() {
  if (--t_op_depth == 0) t_current_op = nullptr;
}
int OpCall::depth() { return t_op_depth; }

std::string_view current_op_name() { return t_current_op ? std::string_view(t_current_op->name) : std::string_view(); }

bool OpCall::needs_grad() const {
  if (!op_.differentiable || !GradMode::is_enabled()) return false;
  return std::any_of(inputs_.begin(), inputs_.end(), [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void OpCall::finish(const std::vector<Tensor*>& outputs, BackwardFn backward) {
  if (!t_recorders.empty()) {
    OpEvent e{op_.name, t_in_backward, kCPU, {}, {}, 0, 0};
    if (start_ != std::chrono::steady_clock::time_point{}) {
      e.micros = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
      e.start_micros = std::chrono::duration<double, std::micro>(start_.time_since_epoch()).count();
    }
    bool device_set = false;
    for (const Tensor& t : inputs_) {
      if (!t.defined()) continue;
      e.inputs.push_back(t.dtype());
      if (!device_set) e.device = t.device(), device_set = true;
    }
    for (const Tensor* t : outputs) {
      if (!t->defined()) continue;
      e.outputs.push_back(t->dtype());
      if (!device_set) e.device = t->device(), device_set = true;
    }
    for (OpRecorder* r : t_recorders) r->events_.push_back(e);
  }
  if (backward && needs_grad()) autograd_hooks().attach(&op_, op_.name, inputs_, outputs, std::move(backward));
}

const std::shared_ptr<autograd::Node>& current_backward_node() { return t_backward_node; }
CurrentBackwardNodeGuard::CurrentBackwardNodeGuard(std::shared_ptr<autograd::Node> node)
    : prev_(std::exchange(t_backward_node, std::move(node))) {}
CurrentBackwardNodeGuard::~CurrentBackwardNodeGuard() { t_backward_node = std::move(prev_); }

namespace {
thread_local std::vector<bool> t_widened_gradients;
}  // namespace

bool widened_gradient_wanted(size_t input) { return input < t_widened_gradients.size() && t_widened_gradients[input]; }
WidenedGradientGuard::WidenedGradientGuard(std::vector<bool> inputs)
    : prev_(std::exchange(t_widened_gradients, std::move(inputs))) {}
WidenedGradientGuard::~WidenedGradientGuard() { t_widened_gradients = std::move(prev_); }

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  refresh_view_history(t);
  tensor_ = t.detach();
  version_ = t.version();
  if (t.requires_grad()) {
    requires_grad_ = true;
    const AutogradMeta* meta = t.autograd_meta();
    if (meta->grad_fn) {
      grad_fn_ = meta->grad_fn;
      output_nr_ = meta->output_nr;
    } else {
      leaf_ = t.impl()->autograd;
    }
  }
}

SavedTensor SavedTensor::output(const Tensor& t, const char* op, uint32_t output_nr) {
  SavedTensor s(t, op);
  s.requires_grad_ = s.tensor_.defined() && is_floating(s.tensor_.dtype());
  s.is_output_ = true;
  s.output_nr_ = output_nr;
  s.grad_fn_ = nullptr;
  s.leaf_ = nullptr;
  return s;
}

Tensor SavedTensor::get() const {
  if (tensor_.defined() && tensor_.version() != version_) {
    fail(op_,
         "a tensor saved for backward (shape {}, {}) was modified in place after it was saved "
         "(version {} now, {} when saved); use an out-of-place op or clone() it first",
         tensor_.shape(), tensor_.dtype(), tensor_.version(), version_);
  }
  if (!requires_grad_ || !GradMode::is_enabled()) return tensor_;
  // Recording a formula: a fresh alias carrying the saved identity (never the caller's handle,
  // whose history may have moved on).
  const std::shared_ptr<autograd::Node>& node = is_output_ ? t_backward_node : grad_fn_;
  if (is_output_ && !node) return tensor_;  // unpacked outside the engine: no node to link to
  auto impl = std::make_shared<TensorImpl>(*tensor_.impl());
  if (leaf_) {
    impl->autograd = leaf_;
  } else {
    impl->autograd = std::make_shared<AutogradMeta>();
    impl->autograd->requires_grad = true;
    impl->autograd->grad_fn = node;
    impl->autograd->output_nr = output_nr_;
  }
  return Tensor(std::move(impl));
}

}  // namespace hg
