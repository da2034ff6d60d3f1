// Fused per-parameter optimizer updates as dispatch stubs, filled by kernels/cpu/optim.cpp and
// kernels/cuda/optim.cu. SGD and Adam use them for contiguous parameters (the composed tensor-op
// code in sgd.cpp / adam.cpp stays for strided CPU parameters). Each kernel reads the skip flag
// (the GradScaler's found_inf) where it lives and writes nothing when it is non-zero, so a GPU
// step never waits for the host.
#pragma once

#include "framework/dispatch.h"
#include "framework/tensor.h"

namespace hg::optim {

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  // Non-zero: the kernel first multiplies each gradient value by it (in float32) and writes the
  // product back into grad (Optimizer::step_unscaling; float32 CPU parameters only).
  float unscale_grad_by = 0.0f;
};
// param, grad (same dtype, contiguous; written only with unscale_grad_by), momentum_buffer
// (contiguous, undefined when momentum is 0), buffer_ready (one int32: 0 until the buffer has
// taken its first gradient; the kernel sets it), skip (one float32, or undefined), cast_out
// (undefined, or a contiguous float16/bfloat16 tensor of a float32 param's shape that receives
// the new param rounded to its dtype, the next autocast region's cast of it; written from the
// unchanged param when the step is skipped). All on one device.
using SgdUpdateFn = void (*)(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                             const Tensor& buffer_ready, const Tensor& skip, const Tensor& cast_out, const SgdHyper& h);
HG_DECLARE_STUB(sgd_update_stub, SgdUpdateFn);

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad;
  float unscale_grad_by = 0.0f;  // as SgdHyper's
};
// param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq when amsgrad), all contiguous and of
// param's dtype; step: one int64 on the device, incremented by the kernel unless skipped;
// skip and cast_out as for SGD.
using AdamUpdateFn = void (*)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                              const Tensor& max_exp_avg_sq, const Tensor& step, const Tensor& skip,
                              const Tensor& cast_out, const AdamHyper& h);
HG_DECLARE_STUB(adam_update_stub, AdamUpdateFn);

}  // namespace hg::optim
