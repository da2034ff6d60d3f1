// TransformerEncoderLayer: self-attention and a feed-forward block, each with a residual and a
// LayerNorm, post-norm (PyTorch's default) or pre-norm (norm_first). PyTorch's submodule names.
#pragma once

#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/norm.h"

namespace hg::nn {

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = true;  // PyTorch's default is false
  bool norm_first = false;
  bool bias = true;
};

// Input [B, L, d_model] (batch_first) or [L, B, d_model]. Called as layer(src[, src_mask,
// is_causal]), with the hooks (see CallableModule).
class TransformerEncoderLayer : public CallableModule<TransformerEncoderLayer> {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  // src_mask as MultiheadAttention's attn_mask; is_causal masks future positions.
  Tensor forward(const Tensor& src, const Tensor& src_mask, bool is_causal = false);

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;

 private:
  Tensor activate(const Tensor& x) const { return gelu_ ? x.gelu() : x.relu(); }
  bool gelu_, norm_first_;
};

}  // namespace hg::nn
