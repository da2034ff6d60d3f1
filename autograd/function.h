// Custom autograd functions: subclass Function<YourFn> with static forward/backward.
//
//   struct Square : hg::autograd::Function<Square> {
//     static hg::Tensor forward(hg::autograd::AutogradContext* ctx, const hg::Tensor& x) {
//       ctx->save_for_backward({x});
//       return x * x;
//     }
//     static hg::TensorList backward(hg::autograd::AutogradContext* ctx, const hg::TensorList& g) {
//       return {g[0] * ctx->saved()[0] * 2.0};
//     }
//   };
//   hg::Tensor y = Square::apply(x);
//
// Errors and the op recorder name it by `static constexpr const char* name = "Square";` where
// the struct declares one, else by its demangled type name. forward runs with grad recording
// off; backward gets one gradient per output and returns one per tensor argument of forward
// (undefined where there is none). Like every node, backward runs under the autocast state that
// forward ran under.
//
// A function that must run in one dtype under autocast declares
//     static constexpr std::optional<hg::Dtype> cast_inputs = hg::kFloat32;
// Inside an autocast region, apply() then casts each eligible hg::Tensor argument (floating,
// not float64, on a device type whose region is enabled) to that dtype, recording the casts so
// gradients flow back in the original dtypes, and runs forward with autocast off. Outside a
// region it changes nothing. backward runs under the state forward's body ran under (autocast
// off, as PyTorch's custom_bwd), so its ops run in the dtype the inputs were cast to. (Only the
// framework's autocast state is read here: autograd does not depend on amp/.)
//
// Under create_graph, backward runs with grad mode on and its ops are recorded: written with
// public ops, it can be differentiated again (saved() gives the tensors with their history,
// outputs of forward included).
#pragma once

#include <any>
#include <map>
#include <optional>
#include <string>
#include <type_traits>

#include "framework/autocast_state.h"
#include "framework/backward.h"
#include "framework/grad_mode.h"
#include "framework/ops/copy.h"
#include "framework/type_name.h"

namespace hg::autograd {

class AutogradContext {
 public:
  void save_for_backward(const TensorList& tensors);
  TensorList saved() const;              // throws if a saved tensor was modified in place since
  std::map<std::string, std::any> data;  // anything else backward needs

 private:
  friend void detail_seal_saved(AutogradContext&, const std::vector<Tensor*>&);
  std::vector<SavedTensor> saved_;
  TensorList to_save_;  // the handles given, until forward's outputs are known
};

namespace detail {
// The node's name in errors and the op recorder: the function's own `static constexpr const char*
// name` when it declares one, else its demangled type name ("main()::TwoGrads").
template <class Derived>
std::string function_name() {
  if constexpr (requires { std::string_view(Derived::name); }) {
    return std::string(Derived::name);
  } else {
    return type_name<Derived>();
  }
}

template <class T>
void collect_tensors(TensorList& out, const T& arg) {
  if constexpr (std::is_convertible_v<const T&, const Tensor&>) out.push_back(arg);
}
inline TensorList as_list(const Tensor& t) { return {t}; }

// Derived::cast_inputs when the function declares it.
template <class D>
constexpr std::optional<Dtype> cast_inputs_of() {
  if constexpr (requires { D::cast_inputs; }) {
    return std::optional<Dtype>(D::cast_inputs);
  } else {
    return std::nullopt;
  }
}

// A Tensor argument cast to `dtype` when an enabled autocast region could have cast it;
// other arguments are forwarded untouched.
template <class T>
decltype(auto) cast_argument(T&& arg, Dtype dtype) {
  if constexpr (std::is_same_v<std::remove_cvref_t<T>, Tensor>) {
    const bool eligible = arg.defined() && is_floating(arg.dtype()) && arg.dtype() != kFloat64 &&
                          autocast_state()[arg.device().type].enabled;
    return eligible ? to(arg, arg.device(), dtype) : Tensor(arg);
  } else {
    return std::forward<T>(arg);
  }
}

// Autocast off on every device type for a scope (forward of a cast_inputs function).
class AutocastOffGuard {
 public:
  explicit AutocastOffGuard(bool active) : active_(active), saved_(autocast_state()) {
    if (active_)
      for (AutocastDeviceState& d : autocast_state().devices) d.enabled = false;
  }
  ~AutocastOffGuard() {
    if (active_) autocast_state() = saved_;
  }
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  bool active_;
  AutocastState saved_;
};
inline TensorList as_list(const TensorList& t) { return t; }
void attach_function(std::string_view name, const TensorList& inputs, std::vector<Tensor*> outputs,
                     std::shared_ptr<AutogradContext> ctx,
                     std::function<TensorList(AutogradContext*, const TensorList&)> backward);
}  // namespace detail

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    constexpr std::optional<Dtype> cast_to = detail::cast_inputs_of<Derived>();
    if constexpr (cast_to.has_value()) {
      if (autocast_state().any_enabled())
        return run(true, detail::cast_argument(std::forward<Args>(args), *cast_to)...);
    }
    return run(false, std::forward<Args>(args)...);
  }

 private:
  template <class... Args>
  static auto run(bool autocast_off, Args&&... args) {
    TensorList inputs;
    (detail::collect_tensors(inputs, args), ...);
    auto ctx = std::make_shared<AutogradContext>();
    bool needs_grad = GradMode::is_enabled();
    if (needs_grad) {
      needs_grad = false;
      for (const Tensor& t : inputs) needs_grad = needs_grad || (t.defined() && t.requires_grad());
    }
    auto result = [&] {
      GradModeGuard no_grad(false);
      detail::AutocastOffGuard autocast_off_guard(autocast_off);
      return Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }();
    if (needs_grad) {
      std::vector<Tensor*> outputs;
      if constexpr (std::is_same_v<decltype(result), Tensor>) {
        outputs.push_back(&result);
      } else {
        for (Tensor& t : result) outputs.push_back(&t);
      }
      // Recorded under the state forward's body ran under (custom_bwd): autocast off for cast_inputs.
      detail::AutocastOffGuard autocast_off_guard(autocast_off);
      detail::attach_function(detail::function_name<Derived>(), inputs, outputs, ctx,
                              [](AutogradContext* c, const TensorList& g) { return Derived::backward(c, g); });
    }
    return result;
  }
};

}  // namespace hg::autograd
