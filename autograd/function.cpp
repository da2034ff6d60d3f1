#include "autograd/function.h"
#include "framework/op.h"

namespace hg::autograd {

void AutogradContext::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t, "custom function");
  to_save_ = tensors;
}

// Saved tensors that are outputs of forward are re-saved as outputs (linked to the node when
// unpacked, with no reference cycle).
void detail_seal_saved(AutogradContext& ctx, const std::vector<Tensor*>& outputs) {
  for (size_t i = 0; i < ctx.to_save_.size(); ++i) {
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (ctx.to_save_[i].defined() && ctx.to_save_[i].is_same(*outputs[j])) {
        ctx.saved_[i] = SavedTensor::output(ctx.to_save_[i], "custom function", static_cast<uint32_t>(j));
      }
    }
  }
  ctx.to_save_.clear();
}

TensorList AutogradContext::saved() const {
  TensorList out;
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

void detail::attach_function(std::string_view name, const TensorList& inputs, std::vector<Tensor*> outputs,
                             std::shared_ptr<AutogradContext> ctx,
                             std::function<TensorList(AutogradContext*, const TensorList&)> backward) {
  detail_seal_saved(*ctx, outputs);
  for (Tensor* t : outputs) *t = t->detach();  // forward may return a view of an input: give it its own history
  const size_t n_inputs = inputs.size();
  std::string label(name);
  autograd_hooks().attach(nullptr, name, inputs, outputs, [ctx, backward, n_inputs, label](const TensorList& g) {
    TensorList grads = backward(ctx.get(), g);
    HG_CHECK(grads.size() == n_inputs, label, "backward returned {} gradients for {} tensor inputs", grads.size(),
             n_inputs);
    return grads;
  });
}

}  // namespace hg::autograd
