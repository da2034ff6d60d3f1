// MultiheadAttention (batch-first or sequence-first) over hg::scaled_dot_product_attention, with
// PyTorch's parameter layout (one in_proj [3E, E] weight, out_proj), so checkpoints carry over.
#pragma once

#include <memory>

#include "nn/linear.h"

namespace hg::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, in training
  bool bias = true;
  bool batch_first = true;  // PyTorch's default is false; [B, L, E] is what halfgrad's layers use
};

// forward(query, key, value): [B, L, E] (batch_first) or [L, B, E]; key/value [B, S, E] or [S, B, E].
// attn_mask follows nn.MultiheadAttention, not the functional op: [L, S] or [B * num_heads, L, S],
// bool true = NOT allowed to attend, or floating (added to the scores). Dropout applies to the
// attention weights in training. Returns the output only (no averaged weights). Called as
// mha(query, key, value[, attn_mask, is_causal]), with the hooks (see CallableModule).
class MultiheadAttention : public CallableModule<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                 bool is_causal = false);
  // in_proj_weight ~ Xavier-uniform, biases 0, out_proj as Linear: PyTorch's initialisation.
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

  std::string extra_repr() const override {
    return fmt::format("embed_dim={}, num_heads={}, dropout={}, batch_first={}", embed_dim_, num_heads_, dropout_,
                       batch_first_);
  }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
  bool batch_first_;
};

}  // namespace hg::nn
