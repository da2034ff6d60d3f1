// Loss functions: cross_entropy (fused log_softmax + nll), nll_loss, mse_loss, l1_loss,
// smooth_l1_loss, huber_loss, kl_div, binary_cross_entropy(_with_logits). 16-bit inputs are computed in float32; the
// loss has the inputs' dtype, as PyTorch.
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

// BatchMean (kl_div only, as PyTorch's 'batchmean'): the sum divided by the size of dim 0.
enum class Reduction { None, Mean, Sum, BatchMean };

enum class PointwiseLoss : uint8_t {
  SquaredError,
  BinaryCrossEntropy,
  BinaryCrossEntropyWithLogits,
  AbsoluteError,
  SmoothL1,
  Huber,
  KlDiv,
  KlDivLogTarget
};

// logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target), and target either int64 class
// indices [N] / [N, d1, ...] (Mean divides by the number of targets that are not ignore_index) or
// class probabilities of the logits' shape and a floating dtype (soft labels; ignore_index does not
// apply and Mean divides by N * d1 * ...), as PyTorch's. label_smoothing in [0, 1] mixes either
// target with the uniform distribution: q (1 - label_smoothing) + label_smoothing / C.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// The regression losses broadcast input against target (as PyTorch, which warns). smooth_l1_loss:
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0 is l1_loss); huber_loss:
// 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta). beta >= 0 and delta > 0.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);
// input holds log-probabilities; target probabilities (log-probabilities if log_target). Pointwise
// target (log target - input), 0 where target = 0. Mean averages over every element, as PyTorch's
// 'mean'; Reduction::BatchMean divides the sum by input.size(0), the mathematically right KL.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);
// pos_weight (optional) broadcasts against the class dim (the last one), as PyTorch.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());
// On probabilities in [0, 1]; log terms are clamped at -100 so 0 and 1 give finite losses.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace hg
