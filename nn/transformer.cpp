#include "nn/transformer.h"

namespace hg::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions o)
    : CallableModule("TransformerEncoderLayer"), gelu_(o.activation == "gelu"), norm_first_(o.norm_first) {
  const std::string& activation = o.activation;
  const int64_t dim_feedforward = o.dim_feedforward;
  const double p = o.dropout;
  const LinearOptions linear{.bias = o.bias};
  const LayerNormOptions norm{.eps = o.layer_norm_eps};
  HG_CHECK(activation == "relu" || activation == "gelu", "TransformerEncoderLayer",
           "activation must be \"relu\" or \"gelu\", got \"{}\"", activation);
  HG_CHECK(dim_feedforward > 0, "TransformerEncoderLayer", "dim_feedforward must be positive, got {}", dim_feedforward);
  self_attn = register_module(
      "self_attn",
      std::make_shared<MultiheadAttention>(
          d_model, nhead, MultiheadAttentionOptions{.dropout = p, .bias = o.bias, .batch_first = o.batch_first}));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_feedforward, linear));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_feedforward, d_model, linear));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d_model, norm));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d_model, norm));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, bool is_causal) {
  // The submodules are called, not forwarded, so their hooks run (as in PyTorch's layer).
  auto sa = [&](const Tensor& x) { return (*dropout1)((*self_attn)(x, x, x, src_mask, is_causal)); };
  auto ff = [&](const Tensor& x) { return (*dropout2)((*linear2)((*dropout)(activate((*linear1)(x))))); };
  if (norm_first_) {
    Tensor x = src + sa((*norm1)(src));
    return x + ff((*norm2)(x));
  }
  Tensor x = (*norm1)(src + sa(src));
  return (*norm2)(x + ff(x));
}

}  // namespace hg::nn
