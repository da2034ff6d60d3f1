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
// forward runs with grad recording off; backward gets one gradient per output and returns one
// per tensor argument of forward (undefined where there is none). Like every node, backward
// runs under the autocast state that forward ran under.
#pragma once

#include <any>
#include <map>
#include <string>
#include <type_traits>

#include "framework/grad_mode.h"
#include "framework/op.h"

namespace hg::autograd {

class AutogradContext {
 public:
  void save_for_backward(const TensorList& tensors);
  TensorList saved() const;              // throws if a saved tensor was modified in place since
  std::map<std::string, std::any> data;  // anything else backward needs

 private:
  std::vector<SavedTensor> saved_;
};

namespace detail {
template <class T>
void collect_tensors(TensorList& out, const T& arg) {
  if constexpr (std::is_convertible_v<const T&, const Tensor&>) out.push_back(arg);
}
inline TensorList as_list(const Tensor& t) { return {t}; }
inline TensorList as_list(const TensorList& t) { return t; }
void attach_function(std::string_view name, const TensorList& inputs, std::vector<Tensor*> outputs,
                     std::shared_ptr<AutogradContext> ctx,
                     std::function<TensorList(AutogradContext*, const TensorList&)> backward);
}  // namespace detail

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
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
      return Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }();
    if (needs_grad) {
      std::vector<Tensor*> outputs;
      if constexpr (std::is_same_v<decltype(result), Tensor>) {
        outputs.push_back(&result);
      } else {
        for (Tensor& t : result) outputs.push_back(&t);
      }
      detail::attach_function(typeid(Derived).name(), inputs, outputs, ctx,
                              [](AutogradContext* c, const TensorList& g) { return Derived::backward(c, g); });
    }
    return result;
  }
};

}  // namespace hg::autograd
