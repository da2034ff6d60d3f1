#include "amp/scaler_ops.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/grad_scaling_kernels.h"

namespace hg::amp {

namespace {
const OpDef kUnscale{"amp_unscale_", false};
const OpDef kUpdateScale{"amp_update_scale_", false};

void check_flag(const Tensor& t, Dtype dtype, Device device, const char* what, const char* op) {
  HG_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device() == device && t.is_contiguous(), op,
           "{} must be a one-element {} tensor on {}", what, dtype, device);
}
}  // namespace

void unscale_grad_(const Tensor& grad, const Tensor& found_inf, const Tensor& scale) {
  HG_CHECK(grad.defined() && is_floating(grad.dtype()), "amp_unscale_", "expected a floating-point gradient");
  check_flag(found_inf, kFloat32, grad.device(), "found_inf", "amp_unscale_");
  check_flag(scale, kFloat32, grad.device(), "scale", "amp_unscale_");
  OpCall call(kUnscale, {grad, found_inf, scale});
  NoGradGuard no_grad;
  if (grad.numel() != 0) {
    Tensor target = grad.is_contiguous() ? grad : contiguous(grad.detach());
    unscale_grad_stub(grad.device().type, target, found_inf, scale);
    if (!target.is_same(grad)) Tensor(grad.detach()).copy_(target);
  }
  grad.bump_version();
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
