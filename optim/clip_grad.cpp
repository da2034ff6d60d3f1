#include "optim/clip_grad.h"

#include <cmath>

#include "framework/capture_state.h"
#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/minmax.h"
#include "framework/ops/reduce.h"
#include "framework/ops/statistics.h"
#include "framework/ops/unary.h"

namespace hg::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_", "norm_type must be positive, got {}", norm_type);
  NoGradGuard no_grad;
  TensorList grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar_tensor(0.0);

  // Norms accumulate in float32 (float64 for float64 gradients), so bf16/fp16 grads lose nothing.
  Tensor total;
  for (const Tensor& g : grads) {
    const Dtype acc = g.dtype() == kFloat64 ? kFloat64 : kFloat32;
    Tensor part;
    if (norm_type == 2.0 || norm_type == 1.0) {
      // One fused reduction per gradient, no |g| or g * g tensor (they were a twentieth of a
      // GPT-2 step on the CPU): the sum of squared 2-norms, or of 1-norms.
      const Tensor n = norm(g.to(acc), norm_type);
      part = norm_type == 2.0 ? n * n : n;
      total = total.defined() ? total + part.to(total.dtype()) : part;
      continue;
    }
    const Tensor a = g.to(acc).abs();
    if (std::isinf(norm_type)) {
      // The largest magnitude (a limit of high powers is unstable), reduced on the gradient's
      // device so the host does not wait; max and maximum propagate NaN.
      part = a.numel() ? max(a) : zeros({}, TensorOptions(acc).device(g.device()));
      total = total.defined() ? maximum(total, part.to(total.dtype())) : part;
    } else {
      part = norm_type == 2.0 ? sum(a * a) : sum(pow(a, norm_type));
      total = total.defined() ? total + part.to(total.dtype()) : part;
    }
  }
  if (!std::isinf(norm_type)) total = pow(total, 1.0 / norm_type);
  total = total.to(kFloat32);
  if (error_if_nonfinite) {
    // The one host wait here (on CUDA): the check has to see the norm before anything is clipped.
    capture::refuse_host_sync("clip_grad_norm_", total.device(),
                              "check error_if_nonfinite on the host (pass error_if_nonfinite=false)");
    const double t = total.item<double>();
    HG_CHECK(std::isfinite(t), "clip_grad_norm_",
             "the total norm of order {} of the gradients is {}; set error_if_nonfinite=false to clip anyway",
             norm_type, t);
  }
  const Tensor ratio = max_norm / (total + 1e-6);
  const Tensor coef = minimum(ratio, ones_like(ratio));
  for (const Tensor& g : grads) {
    Tensor gm = g;
    gm.mul_(coef.to(g.dtype()));
  }
  return total;
}

void clip_grad_value_(const TensorList& params, double clip_value) {
  HG_CHECK(!std::isnan(clip_value), "clip_grad_value_", "clip_value must not be NaN");
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace hg::optim
