// scaled_dot_product_attention: softmax(q k^T * scale + mask) v on [B, H, L, E] tensors, one fused
// kernel that keeps one row of scores per query (never a [L, S] matrix), forward and backward.
#pragma once

#include <optional>

#include "framework/tensor.h"

namespace hg {

// q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev] (one floating dtype, one device) -> [B, H, L, Ev].
// attn_mask (optional) broadcasts to [B, H, L, S]: bool (true = attend, as PyTorch) or floating
// (added to the scores). is_causal masks key j > query i (top-left aligned, as PyTorch's tril) and
// excludes attn_mask. dropout_p in [0, 1) drops attention weights (drawn from the global generator,
// whenever it is > 0: pass 0 outside training, as PyTorch's functional form). scale defaults to
// 1 / sqrt(E). float16/bfloat16 are computed in float32. A query row whose keys are all masked
// gives zeros (PyTorch's composite gives NaN there). A floating attn_mask receives a gradient.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace hg
