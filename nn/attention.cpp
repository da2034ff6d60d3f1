#include "nn/attention.h"

#include <cmath>

#include "framework/ops/attention.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/matmul.h"
#include "nn/init.h"

namespace hg::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : CallableModule("MultiheadAttention"),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      dropout_(options.dropout),
      batch_first_(options.batch_first) {
  const double dropout = options.dropout;
  const bool bias = options.bias;
  HG_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "MultiheadAttention",
           "embed_dim ({}) must be a positive multiple of num_heads ({})", embed_dim, num_heads);
  HG_CHECK(dropout >= 0.0 && dropout < 1.0, "MultiheadAttention", "dropout must be in [0, 1), got {}", dropout);
  register_parameter("in_proj_weight", in_proj_weight, empty({3 * embed_dim, embed_dim}));
  // Xavier-uniform over the whole [3E, E] matrix, as PyTorch's _reset_parameters.
  const double bound = std::sqrt(6.0 / static_cast<double>(embed_dim + 3 * embed_dim));
  init::uniform_(in_proj_weight, -bound, bound);
  if (bias) {
    register_parameter("in_proj_bias", in_proj_bias, zeros({3 * embed_dim}));
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, LinearOptions{.bias = bias}));
  if (bias) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                                   bool is_causal) {
  const int64_t E = embed_dim_, H = num_heads_, D = E / H;
  for (const Tensor* t : {&query, &key, &value}) {
    HG_CHECK(t->defined() && t->dim() == 3 && t->size(2) == E, "MultiheadAttention",
             "expected query, key and value [{}, E = {}], got shapes {}, {} and {}", batch_first_ ? "B, L" : "L, B", E,
             query.shape(), key.defined() ? key.shape() : Shape{}, value.defined() ? value.shape() : Shape{});
  }
  // From here on everything is batch-first.
  const Tensor q_in = batch_first_ ? query : query.transpose(0, 1);
  const Tensor k_in = batch_first_ ? key : key.transpose(0, 1);
  const Tensor v_in = batch_first_ ? value : value.transpose(0, 1);
  const int64_t B = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  HG_CHECK(k_in.size(0) == B && v_in.size(0) == B && v_in.size(1) == S, "MultiheadAttention",
           "query, key and value disagree on batch or key length: shapes {}, {} and {}", query.shape(), key.shape(),
           value.shape());
  // [B, T, E] -> [B, H, T, D]
  auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({B, T, H, D}).transpose(1, 2); };
  auto part = [&](const Tensor& w, int64_t i) { return w.defined() ? w.slice(0, i * E, (i + 1) * E) : Tensor(); };
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {  // self-attention: one [3E, E] GEMM
    const Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    q = heads(qkv.slice(2, 0, E), L);
    k = heads(qkv.slice(2, E, 2 * E), S);
    v = heads(qkv.slice(2, 2 * E, 3 * E), S);
  } else {
    q = heads(linear(q_in, part(in_proj_weight, 0), part(in_proj_bias, 0)), L);
    k = heads(linear(k_in, part(in_proj_weight, 1), part(in_proj_bias, 1)), S);
    v = heads(linear(v_in, part(in_proj_weight, 2), part(in_proj_bias, 2)), S);
  }
  Tensor mask;
  if (attn_mask.defined()) {
    const bool ok = (attn_mask.dim() == 2 && attn_mask.shape() == Shape{L, S}) ||
                    (attn_mask.dim() == 3 && attn_mask.shape() == Shape{B * H, L, S});
    HG_CHECK(ok, "MultiheadAttention",
             "attn_mask must be [L, S] = [{}, {}] or [B * num_heads, L, S] = [{}, {}, {}], got {}", L, S, B * H, L, S,
             attn_mask.shape());
    mask = attn_mask.dim() == 3 ? attn_mask.reshape({B, H, L, S}) : attn_mask;
    // nn.MultiheadAttention's bool mask marks what may NOT be attended; the op's marks what may.
    if (mask.dtype() == kBool) mask = eq(mask, zeros({}, TensorOptions(kBool).device(mask.device())));
  }
  const Tensor o = scaled_dot_product_attention(q, k, v, mask, is_training() ? dropout_ : 0.0, is_causal);
  const Tensor merged = o.transpose(1, 2).reshape({B, L, E});
  const Tensor y = out_proj->forward(merged);
  return batch_first_ ? y : y.transpose(0, 1);
}

}  // namespace hg::nn
