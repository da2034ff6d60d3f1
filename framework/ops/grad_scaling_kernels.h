// The GradScaler kernels as dispatch stubs, so each backend supplies its own: amp/ runs
// them, kernels/cpu and kernels/cuda fill them in. Internal: not installed. Neither reads a value on the host.
#pragma once

#include "framework/dispatch.h"
#include "framework/tensor.h"

namespace hg {

// In one pass over each of `grads` (contiguous, non-empty, floating, all of one dtype and on one
// device): sets found_inf[0] = 1 if any element is inf or NaN, and multiplies every element by
// 1/scale[0], the reciprocal taken in double. found_inf and scale are one-element float32 tensors
// on the gradients' device. CUDA treats the whole list in one launch (per 32 tensors).
using UnscaleGradFn = void (*)(const TensorList& grads, const Tensor& found_inf, const Tensor& scale);
HG_DECLARE_STUB(unscale_grad_stub, UnscaleGradFn);

// The check alone: found_inf[0] = 1 if any element of `grads` (as for unscale_grad_stub) is inf
// or NaN; the gradients are only read. Optional: GradScaler::step's folded unscale (CPU) uses it.
using FindNonFiniteFn = void (*)(const TensorList& grads, const Tensor& found_inf);
HG_DECLARE_STUB(find_non_finite_stub, FindNonFiniteFn);

// The loss-scale update, in place on one-element tensors on one device: scale (float32),
// growth_tracker (int32, clean steps in a row) and found_inf (float32). Inf/NaN found:
// scale *= backoff_factor and the tracker resets. Otherwise the tracker counts up; when it
// reaches growth_interval, scale *= growth_factor if that is finite, and the tracker resets.
using UpdateScaleFn = void (*)(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                               double growth_factor, double backoff_factor, int64_t growth_interval);
HG_DECLARE_STUB(update_scale_stub, UpdateScaleFn);

}  // namespace hg
