#include "nn/transformer.h"

namespace hg::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double p,
                                                 const std::string& activation, double layer_norm_eps, bool batch_first,
                                                 bool norm_first, bool bias)
    : Module("TransformerEncoderLayer"), gelu_(activation == "gelu"), norm_first_(norm_first) {
  HG_CHECK(activation == "relu" || activation == "gelu", "TransformerEncoderLayer",
           "activation must be \"relu\" or \"gelu\", got \"{}\"", activation);
  HG_CHECK(dim_feedforward > 0, "TransformerEncoderLayer", "dim_feedforward must be positive, got {}", dim_feedforward);
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead, p, bias, batch_first));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_feedforward, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_feedforward, d_model, bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{d_model}, layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, bool is_causal) {
  auto sa = [&](const Tensor& x) { return dropout1->forward(self_attn->forward(x, x, x, src_mask, is_causal)); };
  auto ff = [&](const Tensor& x) {
    return dropout2->forward(linear2->forward(dropout->forward(activate(linear1->forward(x)))));
  };
  if (norm_first_) {
    Tensor x = src + sa(norm1->forward(src));
    return x + ff(norm2->forward(x));
  }
  Tensor x = norm1->forward(src + sa(src));
  return norm2->forward(x + ff(x));
}

}  // namespace hg::nn
