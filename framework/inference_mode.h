// InferenceModeGuard: PyTorch's torch.inference_mode for a scope of pure inference. Ops record no
// autograd nodes (as under NoGradGuard) and is_inference_mode_enabled() says so to code that
// wants to skip work only training needs. Unlike PyTorch, halfgrad has no separate "inference
// tensors": what is made inside may be used with autograd afterwards, as a NoGradGuard's results.
#pragma once

#include "framework/grad_mode.h"

namespace hg {

bool is_inference_mode_enabled();

class InferenceModeGuard {
 public:
  explicit InferenceModeGuard(bool enabled = true);
  ~InferenceModeGuard();
  InferenceModeGuard(const InferenceModeGuard&) = delete;
  InferenceModeGuard& operator=(const InferenceModeGuard&) = delete;

 private:
  bool prev_inference_, prev_grad_;
};

}  // namespace hg
