// Not installed: the core's plumbing, not user API (the recorder is framework/op_recorder.h).
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

#include "framework/backward.h"
#include "framework/op_recorder.h"
#include "framework/tensor.h"

namespace hg {

// How an op takes part in autograd. The last two name the training step's widened-gradient fast
// path (docs/AMP.md, "What the training step fuses"), so the engine reads a flag, never an op's name.
struct OpTraits {
  bool differentiable = true;
  // Whether the backward formula is itself differentiable (written in public ops), so that
  // create_graph can record it. false: the backward calls a raw kernel, and the engine refuses
  // create_graph through the op ("[op] double backward is not supported").
  bool double_differentiable = true;
  // A cast between dtypes whose backward casts the gradient back: where its input is float32 and
  // its only gradient arrives already rounded to its 16-bit dtype but held as float32, the engine
  // may pass that gradient straight on (widened_gradient_wanted).
  bool dtype_cast = false;
  // A backward formula that may write an input's gradient widened when the engine grants it
  // (widened_gradient_wanted; linear's weight gradient).
  bool writes_widened_gradients = false;
};

struct OpDef {
  const char* name;
  bool differentiable = true;
  bool double_differentiable = true;  // see OpTraits
  bool dtype_cast = false;
  bool writes_widened_gradients = false;
  // The op's autocast policy row, bound by the autocast layer the first time the op runs inside a
  // region (amp/policy_table.cpp), so no call looks the name up again. Opaque to the core.
  mutable std::atomic<const void*> autocast_row{nullptr};

  explicit OpDef(const char* name, bool differentiable = true, bool double_differentiable = true);
  OpDef(const char* name, OpTraits traits);
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;
};

// Every OpDef ever constructed, in construction order.
const std::vector<const OpDef*>& op_registry();
const OpDef* find_op(std::string_view name);

// ---- hooks filled by the upper layers ----
struct AutocastResult {
  TensorList inputs;
  std::optional<Dtype> output_dtype;  // set by the "fp32 with output dtype" policy
};
using AutocastHook = AutocastResult (*)(const OpDef& op, TensorList inputs);
void set_autocast_hook(AutocastHook hook);

// An op that a region runs as a different computation (an fp8 region runs linear and mm as fp8
// GEMMs, amp/fp8_autocast.h) asks op_override first, before its OpCall; a defined result is the
// op's result. The hook is asked only at the outermost level, outside backward formulas, while
// some autocast is on; it returns an undefined tensor to let the op run as usual.
using OpOverrideHook = Tensor (*)(const OpDef& op, const TensorList& inputs);
void set_op_override_hook(OpOverrideHook hook);
Tensor op_override(const OpDef& op, const TensorList& inputs);

struct AutogradHooks {
  virtual ~AutogradHooks() = default;
  // `op` is the public op that ran, or null for a custom autograd Function (named by `name`).
  virtual void attach(const OpDef* op, std::string_view name, const TensorList& inputs,
                      const std::vector<Tensor*>& outputs, BackwardFn backward) = 0;
  virtual void backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph) = 0;
  // A gradient hook on a non-leaf tensor (kept on its grad_fn; leaves keep theirs in AutogradMeta).
  virtual RemovableHandle register_node_hook(const Tensor& t, GradHook fn) = 0;
};
void set_autograd_hooks(AutogradHooks* hooks);
AutogradHooks& autograd_hooks();  // throws when the autograd layer is not linked

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
  const OpDef& op() const { return op_; }
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

}  // namespace hg
