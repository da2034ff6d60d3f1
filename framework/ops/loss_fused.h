// cross_entropy_fused_: the classifier's loss that writes its own gradient into the logits, as
// llm.c's fused classifier does. A language model's logits are its largest tensor (16 x 1024 x
// 50304 bf16 is 1.6 GB); cross_entropy keeps them for backward and backward allocates a gradient
// as large, where this op computes the gradient during the forward, in the logits' own dtype and
// storage, and backward only scales it by the incoming gradient. So the loss costs no memory
// beyond the logits. Explicit, not a pattern match: call it where the logits are used for nothing
// else.
#pragma once

#include "framework/ops/loss.h"

namespace hg {

// logits [N, C] (any floating dtype; 16-bit logits are read and written in their dtype and
// computed in float32, also under autocast), target int64 [N]. Returns the loss in float32
// (float64 for float64 logits) with cross_entropy's reduction, ignore_index and label_smoothing.
// When a backward will need it (grad mode on and logits require grad) the logits' values are
// replaced by the gradient: read them after this call only as that. Its backward can run once
// (retain_graph cannot take it twice) and cannot be differentiated again. Logits that are a leaf
// requiring grad are refused (their values are parameters); non-contiguous logits work through a
// contiguous copy (then nothing is saved).
//
// classes: the first `classes` columns are the classes and the rest padding, as llm.c pads
// GPT-2's vocabulary of 50257 to 50304 so the classifier's rows stay aligned for 16-byte loads
// and its GEMM dimensions multiples of 16 (fp8 needs that). Padding columns are left out of the
// softmax, label smoothing and the loss, and their gradient is 0; targets must be below
// `classes`. -1 (the default): every column is a class.
Tensor cross_entropy_fused_(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                            int64_t ignore_index = -100, double label_smoothing = 0.0, int64_t classes = -1);

}  // namespace hg
