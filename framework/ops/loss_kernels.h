// Kernel plumbing behind loss.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/loss.h"

namespace hg {

// logits [N, C, S] and target [N, S] (int64), contiguous. Writes per-sample losses and the
// log-sum-exp of each row (both [N, S], float32 or float64) and writes how many targets were not
// ignore_index into `count` (0-d int64, on the device: the mean divides by it there, so the host
// never waits for it). A target outside [0, C) raises "[op] ..." naming it: at once on the
// CPU; on CUDA at the next host synchronisation (see kernels/cuda/runtime.h), the row's loss being 0.
using CrossEntropyFn = void (*)(const Tensor& losses, const Tensor& lse, const Tensor& count, const Tensor& logits,
                                const Tensor& target, int64_t ignore_index, double label_smoothing);
HG_DECLARE_STUB(cross_entropy_stub, CrossEntropyFn);

// grad_logits [N, C, S] = (softmax - (1 - eps) onehot - eps / C) * grad_loss[n, s] (0 where
// ignored); grad_loss is [N, S] or a 0-d tensor applied to every sample, in lse's dtype.
using CrossEntropyBackwardFn = void (*)(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& target, const Tensor& lse, int64_t ignore_index,
                                        double label_smoothing);
HG_DECLARE_STUB(cross_entropy_backward_stub, CrossEntropyBackwardFn);

// losses[n, s] = -log_probs[n, target, s] (0 where ignored); writes the non-ignored count into
// `count` and reports bad targets as cross_entropy does.
using NllFn = void (*)(const Tensor& losses, const Tensor& count, const Tensor& log_probs, const Tensor& target,
                       int64_t ignore_index);
HG_DECLARE_STUB(nll_stub, NllFn);

// grad_log_probs (zeroed by the caller) [n, target, s] = -grad_loss[n, s] (grad_loss as above).
using NllBackwardFn = void (*)(const Tensor& grad_log_probs, const Tensor& grad_loss, const Tensor& target,
                               int64_t ignore_index);
HG_DECLARE_STUB(nll_backward_stub, NllBackwardFn);

// out = loss(a, b[, c]) elementwise; all operands of out's shape and dtype (c, the pos_weight, may
// be undefined). SquaredError: (a - b)^2; BinaryCrossEntropy: -(b log a + (1 - b) log(1 - a)) with
// logs clamped at -100; BinaryCrossEntropyWithLogits: the stable form of the same on sigmoid(a);
// AbsoluteError: |a - b|; SmoothL1 (param = beta > 0): 0.5 d^2 / beta where |d| < beta, else
// |d| - 0.5 beta; Huber (param = delta): 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta);
// KlDiv: b (log b - a), 0 where b = 0; KlDivLogTarget: exp(b) (b - a).
using PointwiseLossFn = void (*)(PointwiseLoss kind, const Tensor& out, const Tensor& a, const Tensor& b,
                                 const Tensor& c, double param);
HG_DECLARE_STUB(pointwise_loss_stub, PointwiseLossFn);

}  // namespace hg

namespace hg::detail {
// Reduces per-element losses (float32/float64, contiguous) as asked and converts them to
// out_dtype, calling kernels directly so no extra op is recorded. Mean divides by `count`, a 0-d
// tensor in losses' dtype on losses' device (so no host synchronisation is needed for it).
Tensor reduce_loss(const Tensor& losses, Reduction reduction, const Tensor& count, Dtype out_dtype);
// reduce_loss with a count known on the host (the elementwise losses: numel).
Tensor reduce_loss(const Tensor& losses, Reduction reduction, int64_t count, Dtype out_dtype);
// The dtype losses are computed in: float64 for float64 inputs, float32 otherwise.
inline Dtype loss_compute_dtype(Dtype d) { return d == kFloat64 ? kFloat64 : kFloat32; }
}  // namespace hg::detail
