// Fused per-parameter optimizer updates as dispatch stubs, filled by kernels/cpu/optim.cpp and
// kernels/cuda/optim.cu. SGD and Adam use them for contiguous parameters (the composed tensor-op
// code in sgd.cpp / adam.cpp stays for strided CPU parameters). Each kernel reads the skip flag
// (the GradScaler's found_inf) where it lives and writes nothing when it is non-zero, so a GPU
// step never waits for the host.
#pragma once

#include <initializer_list>
#include <utility>

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

// ---- Multi-tensor updates ----
// One call updates a list of parameters of one dtype on one device, so a step costs a launch (or
// a pass) per (group, device, dtype) instead of one per parameter. The hyper-parameters are read
// from `hyper`, a float64 tensor on the parameters' device written by Optimizer::set_lr and
// load_state_dict with an asynchronous copy: a CUDA step captured in a graph reads the learning
// rate of the moment it is replayed, and a learning-rate schedule never syncs. The per-element
// maths is the per-parameter kernels', so both paths agree bit for bit.

// hyper's slots (float64 [kSgdHyperSize]).
enum SgdHyperSlot : int { kSgdLr, kSgdMomentum, kSgdDampening, kSgdWeightDecay, kSgdHyperSize };
// Lists: params, grads (as for sgd_update_stub, one per param), momentum_buffers and buffer_ready
// (one per param, or both empty when momentum is 0), cast_outs (one per param, entries may be
// undefined). nesterov and unscale_grad_by as in SgdHyper.
using SgdMultiUpdateFn = void (*)(const TensorList& params, const TensorList& grads, const TensorList& momentum_buffers,
                                  const TensorList& buffer_ready, const Tensor& skip, const TensorList& cast_outs,
                                  const Tensor& hyper, bool nesterov, float unscale_grad_by);
HG_DECLARE_STUB(sgd_multi_update_stub, SgdMultiUpdateFn);

// hyper's slots (float64 [kAdamHyperSize]).
enum AdamHyperSlot : int { kAdamLr, kAdamBeta1, kAdamBeta2, kAdamEps, kAdamWeightDecay, kAdamHyperSize };
// Lists: params, grads, exp_avgs, exp_avg_sqs, steps (one-element int64 each), cast_outs: one per
// param; max_exp_avg_sqs one per param with amsgrad, empty without.
using AdamMultiUpdateFn = void (*)(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                                   const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                                   const TensorList& steps, const Tensor& skip, const TensorList& cast_outs,
                                   const Tensor& hyper, bool decoupled, float unscale_grad_by);
HG_DECLARE_STUB(adam_multi_update_stub, AdamMultiUpdateFn);

// The checks both devices' multi-tensor kernels make (hg::Error naming `op`): list lengths, one
// device and dtype, contiguous operands of each param's size, a float64 hyper of `hyper_size`
// slots on that device. `states` are the per-param state lists (empty lists are skipped), `flags`
// the one-element lists (ready flags, steps) with their dtype.
void check_multi_update(const char* op, const TensorList& params, const TensorList& grads,
                        std::initializer_list<const TensorList*> states,
                        std::initializer_list<std::pair<const TensorList*, Dtype>> flags, const TensorList& cast_outs,
                        const Tensor& skip, const Tensor& hyper, int64_t hyper_size);

}  // namespace hg::optim
