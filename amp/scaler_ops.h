// The GradScaler's kernels as registered ops ("amp_unscale_", "amp_find_non_finite",
// "amp_update_scale_"), so they show in the op recorder and the registry checks that every
// backend supplies them.
#pragma once

#include "framework/tensor.h"

namespace hg::amp {

// grad *= 1/scale in place (the reciprocal in double rounded to float32, the product in float32
// for float32 and 16-bit gradients: PyTorch's rule) and found_inf = 1 if grad held inf/NaN, in
// one pass. grad: floating, any layout; found_inf, scale: one-element float32 on grad's device.
void unscale_grad_(const Tensor& grad, const Tensor& found_inf, const Tensor& scale);
// The same for many gradients on found_inf's device: one kernel call per dtype (on CUDA one
// launch per 32 gradients of a dtype), so small-parameter models are not launch-bound.
void unscale_grads_(const TensorList& grads, const Tensor& found_inf, const Tensor& scale);

// found_inf = 1 if any of `grads` (contiguous, floating, on found_inf's device) holds inf or NaN;
// the gradients are only read. For GradScaler::step's folded unscale (CPU only).
void find_non_finite(const TensorList& grads, const Tensor& found_inf);

// The scale update (see update_scale_stub in framework/ops/grad_scaling.h), in place.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                   double backoff_factor, int64_t growth_interval);

}  // namespace hg::amp
