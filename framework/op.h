// The plumbing every public op goes through: its OpDef (name, listed in the op registry), and OpCall, which applies
// autocast to the inputs, tells the op recorder what ran, and hands the backward formula to autograd. autocast and
// autograd are hooks that the amp and autograd layers install, so the tensor core never depends on them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "framework/tensor.h"

namespace hg {

struct OpDef {
  const char* name;
  bool differentiable = true;
  // Whether the backward formula is itself differentiable (written in public ops), so that
  // create_graph can record it. false: the backward calls a raw kernel, and the engine refuses
  // create_graph through the op ("[op] double backward is not supported").
  bool double_differentiable = true;
  // The op's autocast policy row, bound by the autocast layer the first time the op runs inside a
  // region (amp/policy_table.cpp), so no call looks the name up again. Opaque to the core.
  mutable std::atomic<const void*> autocast_row{nullptr};

  explicit OpDef(const char* name, bool differentiable = true, bool double_differentiable = true);
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;
};

// Every OpDef ever constructed, in construction order.
const std::vector<const OpDef*>& op_registry();
const OpDef* find_op(std::string_view name);

// Maps the gradients of an op's outputs to the gradients of its inputs (one per input, an
// undefined Tensor where an input gets none). A missing output gradient is an undefined Tensor.
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// ---- hooks filled by the upper layers ----
struct AutocastResult {
  TensorList inputs;
  std::optional<Dtype> output_dtype;  // set by the "fp32 with output dtype" policy
};
using AutocastHook = AutocastResult (*)(const OpDef& op, TensorList inputs);
void set_autocast_hook(AutocastHook hook);

struct AutogradHooks {
  virtual ~AutogradHooks() = default;
  virtual void attach(std::string_view name, const TensorList& inputs, const std::vector<Tensor*>& outputs,
                      BackwardFn backward) = 0;
  virtual void backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph) = 0;
  // A gradient hook on a non-leaf tensor (kept on its grad_fn; leaves keep theirs in AutogradMeta).
  virtual RemovableHandle register_node_hook(const Tensor& t, GradHook fn) = 0;
};
void set_autograd_hooks(AutogradHooks* hooks);
AutogradHooks& autograd_hooks();  // throws when the autograd layer is not linked

// ---- the op recorder (docs/AMP.md section 6) ----
struct OpEvent {
  std::string name;
  bool backward = false;  // run by the autograd engine
  Device device;
  std::vector<Dtype> inputs;
  std::vector<Dtype> outputs;
  // Wall time from the op's start (after autocast cast its inputs: those casts are events of
  // their own) to the end of its kernel, before its autograd node is recorded. An op that calls
  // other ops includes their time.
  double micros = 0;
};

// Records, while alive, every op run on this thread (nested recorders each see every op).
class OpRecorder {
 public:
  OpRecorder();
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;
  const std::vector<OpEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  // Events with this name (e.g. count("to") after an autocast region).
  size_t count(std::string_view name, std::optional<bool> backward = std::nullopt) const;
  // The events summed per op name and pass (forward or backward), the largest total time first:
  // where a step's time goes, as PyTorch's profiler's key_averages() shows it.
  struct Total {
    std::string name;
    bool backward = false;
    size_t calls = 0;
    double micros = 0;
  };
  std::vector<Total> totals() const;

 private:
  friend class OpCall;
  std::vector<OpEvent> events_;
};

// Whether the current thread is running a backward formula (set by the autograd engine).
bool in_backward_pass();
class BackwardPassGuard {
 public:
  BackwardPassGuard();
  ~BackwardPassGuard();
  BackwardPassGuard(const BackwardPassGuard&) = delete;
  BackwardPassGuard& operator=(const BackwardPassGuard&) = delete;

 private:
  bool prev_;
};

// One call of a public op:
//   OpCall call(kMmOp, {a, b});              // autocast applied to the inputs here
//   const Tensor& x = call.input(0);
//   ... check, run the kernel into `out` ...
//   BackwardFn bw; if (call.needs_grad()) bw = [...](const TensorList& g) { ... };
//   call.finish({&out}, std::move(bw));      // recorder event + autograd node
// Autocast applies at the outermost op only (as in PyTorch): a public op called while another
// OpCall is alive on this thread runs in the dtypes it is given, though it still records its
// event and its autograd node. The casts the hook makes for the outer op happen before the outer
// call counts as open, so they are recorded like any op.
class OpCall {
 public:
  OpCall(const OpDef& op, TensorList inputs);
  ~OpCall();
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;
  // How many OpCalls are open on this thread (0 outside every op).
  static int depth();
  const Tensor& input(size_t i) const { return inputs_[i]; }
  const TensorList& inputs() const { return inputs_; }
  std::optional<Dtype> output_dtype() const { return output_dtype_; }
  std::string_view name() const { return op_.name; }
  bool needs_grad() const;
  void finish(const std::vector<Tensor*>& outputs, BackwardFn backward = nullptr);

 private:
  const OpDef& op_;
  TensorList inputs_;
  std::optional<Dtype> output_dtype_;
  std::chrono::steady_clock::time_point start_{};  // read only while an OpRecorder is alive
};

// The public op this thread is running (its outermost OpCall), or "" outside any op; used by
// errors raised deep inside an op, such as a failed allocation, to say which call failed.
std::string_view current_op_name();

// The autograd node whose backward formula runs on this thread (the engine sets it around each
// formula), so that a saved output can be linked to it when the formula is recorded.
const std::shared_ptr<autograd::Node>& current_backward_node();
class CurrentBackwardNodeGuard {
 public:
  explicit CurrentBackwardNodeGuard(std::shared_ptr<autograd::Node> node);
  ~CurrentBackwardNodeGuard();
  CurrentBackwardNodeGuard(const CurrentBackwardNodeGuard&) = delete;
  CurrentBackwardNodeGuard& operator=(const CurrentBackwardNodeGuard&) = delete;

 private:
  std::shared_ptr<autograd::Node> prev_;
};

// Inside a backward formula the engine runs: whether the gradient of input `input` may be
// returned as float32 holding values already rounded to the input's 16-bit dtype. The engine
// grants it where that gradient's only way on is a cast back to float32 (an autocast cast of a
// float32 weight, whose gradient nothing else adds to or looks at): the cast would widen it
// exactly, so a formula that can write the float32 form directly (linear's weight gradient)
// saves the cast's pass over it, with the same values. False outside such a formula.
bool widened_gradient_wanted(size_t input);
class WidenedGradientGuard {
 public:
  explicit WidenedGradientGuard(std::vector<bool> inputs);
  ~WidenedGradientGuard();
  WidenedGradientGuard(const WidenedGradientGuard&) = delete;
  WidenedGradientGuard& operator=(const WidenedGradientGuard&) = delete;

 private:
  std::vector<bool> prev_;
};

// A tensor kept for backward: its data (a detached alias), the storage version at save time and
// its autograd identity. get() throws, naming the op, when the tensor was modified in place since.
// With grad mode off (a plain backward) get() is the detached alias; with grad mode on (the
// engine under create_graph) it is an alias that keeps the saved tensor's history, so the
// recorded formula differentiates through it. An op's own output is saved with output(): it
// keeps no link to its node (node -> saved output -> node would be a cycle, as in PyTorch) and
// is linked to the node running the formula when unpacked.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // For output `output_nr` of the op that saves it (saved before call.finish()).
  static SavedTensor output(const Tensor& t, const char* op, uint32_t output_nr = 0);
  Tensor get() const;

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
  const char* op_ = "";
  bool requires_grad_ = false;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
  std::shared_ptr<autograd::Node> grad_fn_;  // a non-leaf input's producer
  std::shared_ptr<AutogradMeta> leaf_;       // a leaf input's slot (shared with every handle of it)
};

}  // namespace hg
