// Loss functions: cross_entropy (fused log_softmax + nll), nll_loss, mse_loss,
// binary_cross_entropy(_with_logits). 16-bit inputs are computed in float32; the loss has the
// inputs' dtype, as PyTorch.
#pragma once

#include <optional>

#include "framework/op.h"

namespace hg {

enum class Reduction { None, Mean, Sum };

enum class PointwiseLoss : uint8_t { SquaredError, BinaryCrossEntropy, BinaryCrossEntropyWithLogits };

// logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target), target int64 class indices
// [N] / [N, d1, ...]. Mean divides by the number of targets that are not ignore_index.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// pos_weight (optional) broadcasts against the class dim (the last one), as PyTorch.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());
// On probabilities in [0, 1]; log terms are clamped at -100 so 0 and 1 give finite losses.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace hg
