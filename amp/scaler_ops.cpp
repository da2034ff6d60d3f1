#include "amp/scaler_ops.h"

#include <algorithm>
#include <vector>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/grad_scaling_kernels.h"

namespace hg::amp {

namespace {
const OpDef kUnscale{"amp_unscale_", false};
const OpDef kFindNonFinite{"amp_find_non_finite", false};
const OpDef kUpdateScale{"amp_update_scale_", false};

void check_flag(const Tensor& t, Dtype dtype, Device device, const char* what, const char* op) {
  HG_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device() == device && t.is_contiguous(), op,
           "{} must be a one-element {} tensor on {}", what, dtype, device);
}
}  // namespace

void unscale_grad_(const Tensor& grad, const Tensor& found_inf, const Tensor& scale) {
  unscale_grads_({grad}, found_inf, scale);
}

void unscale_grads_(const TensorList& grads, const Tensor& found_inf, const Tensor& scale) {
  HG_CHECK(found_inf.defined(), "amp_unscale_", "found_inf is undefined");
  const Device device = found_inf.device();
  for (const Tensor& grad : grads) {
    HG_CHECK(grad.defined() && is_floating(grad.dtype()), "amp_unscale_", "expected a floating-point gradient");
    check_flag(found_inf, kFloat32, grad.device(), "found_inf", "amp_unscale_");
  }
  check_flag(found_inf, kFloat32, device, "found_inf", "amp_unscale_");
  check_flag(scale, kFloat32, device, "scale", "amp_unscale_");
  TensorList inputs = grads;
  inputs.push_back(found_inf);
  inputs.push_back(scale);
  OpCall call(kUnscale, inputs);
  NoGradGuard no_grad;
  // Grouped by dtype, non-contiguous gradients through a contiguous copy written back after.
  std::vector<Dtype> dtypes;
  for (const Tensor& g : grads)
    if (std::find(dtypes.begin(), dtypes.end(), g.dtype()) == dtypes.end()) dtypes.push_back(g.dtype());
  for (Dtype dtype : dtypes) {
    TensorList targets;
    std::vector<std::pair<Tensor, Tensor>> copy_back;
    for (const Tensor& g : grads) {
      if (g.dtype() != dtype || g.numel() == 0) continue;
      Tensor target = g.is_contiguous() ? g : contiguous(g.detach());
      if (!target.is_same(g)) copy_back.emplace_back(g, target);
      targets.push_back(target);
    }
    if (!targets.empty()) unscale_grad_stub(device.type, targets, found_inf, scale);
    for (const auto& [g, target] : copy_back) Tensor(g.detach()).copy_(target);
  }
  for (const Tensor& g : grads) g.bump_version();
  call.finish({});
}

void find_non_finite(const TensorList& grads, const Tensor& found_inf) {
  HG_CHECK(found_inf.defined(), "amp_find_non_finite", "found_inf is undefined");
  const Device device = found_inf.device();
  check_flag(found_inf, kFloat32, device, "found_inf", "amp_find_non_finite");
  HG_CHECK(find_non_finite_stub.has(device.type), "amp_find_non_finite", "no kernel for {}", device);
  TensorList targets;
  for (const Tensor& grad : grads) {
    HG_CHECK(grad.defined() && is_floating(grad.dtype()) && grad.is_contiguous() && grad.device() == device,
             "amp_find_non_finite", "expected contiguous floating-point gradients on {}", device);
    if (grad.numel()) targets.push_back(grad);
  }
  TensorList inputs = grads;
  inputs.push_back(found_inf);
  OpCall call(kFindNonFinite, inputs);
  if (!targets.empty()) find_non_finite_stub(device.type, targets, found_inf);
  found_inf.bump_version();
  call.finish({});
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                   double backoff_factor, int64_t growth_interval) {
  HG_CHECK(scale.defined(), "amp_update_scale_", "scale is undefined");
  check_flag(scale, kFloat32, scale.device(), "scale", "amp_update_scale_");
  check_flag(growth_tracker, kInt32, scale.device(), "growth_tracker", "amp_update_scale_");
  check_flag(found_inf, kFloat32, scale.device(), "found_inf", "amp_update_scale_");
  OpCall call(kUpdateScale, {scale, growth_tracker, found_inf});
  update_scale_stub(scale.device().type, scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                    growth_interval);
  scale.bump_version();
  growth_tracker.bump_version();
  call.finish({});
}

}  // namespace hg::amp
