// nn::MultiheadAttention and nn::TransformerEncoderLayer against composites written here with the
// modules' own parameters (linear, softmax, matmul, layer_norm), plus gradchecks in float64.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {

// Multi-head attention by hand: batch-first x [B, L, E], key/value [B, S, E]; mask additive [L, S].
Tensor mha_ref(nn::MultiheadAttention& m, const Tensor& x, const Tensor& kv, const Tensor& add_mask, bool causal) {
  const int64_t E = m.embed_dim(), H = m.num_heads(), D = E / H, B = x.size(0), L = x.size(1), S = kv.size(1);
  const Tensor w = m.in_proj_weight, b = m.in_proj_bias;
  auto proj = [&](const Tensor& t, int64_t i) {
    return linear(t, w.slice(0, i * E, (i + 1) * E), b.slice(0, i * E, (i + 1) * E));
  };
  auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({B, T, H, D}).transpose(1, 2); };
  const Tensor q = heads(proj(x, 0), L), k = heads(proj(kv, 1), S), v = heads(proj(kv, 2), S);
  Tensor s = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(D)));
  if (add_mask.defined()) s = s + add_mask;
  if (causal) {
    std::vector<double> cm(static_cast<size_t>(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) cm[static_cast<size_t>(i * S + j)] = j > i ? -INFINITY : 0.0;
    s = s + tensor(cm, {L, S}).to(x.dtype());
  }
  const Tensor o = matmul(softmax(s, -1), v).transpose(1, 2).reshape({B, L, E});
  return linear(o, m.out_proj->weight, m.out_proj->bias);
}

}  // namespace

TEST_CASE("MultiheadAttention matches attention written by hand (self, cross, masks, sequence-first)") {
  manual_seed(21);
  nn::MultiheadAttention m(8, 2);
  m.to(kFloat64);
  CHECK(m.in_proj_weight.shape() == Shape{24, 8});
  CHECK(m.num_parameters() == 24 * 8 + 24 + 8 * 8 + 8);
  const Tensor x = randn({3, 5, 8}, TensorOptions(kFloat64)), kv = randn({3, 7, 8}, TensorOptions(kFloat64));
  check_close(m.forward(x), mha_ref(m, x, x, Tensor(), false));
  check_close(m.forward(x, x, x, Tensor(), true), mha_ref(m, x, x, Tensor(), true));
  check_close(m.forward(x, kv, kv), mha_ref(m, x, kv, Tensor(), false));
  // A bool mask marks what may NOT be attended (nn.MultiheadAttention's convention).
  std::vector<uint8_t> bm(35);
  std::vector<double> am(35);
  for (size_t i = 0; i < bm.size(); ++i) {
    bm[i] = i % 3 == 1;
    am[i] = bm[i] ? -INFINITY : 0.0;
  }
  const Tensor bmask = tensor(bm, {5, 7}).to(kBool), amask = tensor(am, {5, 7});
  check_close(m.forward(x, kv, kv, bmask), mha_ref(m, x, kv, amask, false));
  const Tensor fmask = randn({5, 7}, TensorOptions(kFloat64));
  check_close(m.forward(x, kv, kv, fmask), mha_ref(m, x, kv, fmask, false));
  // [B * H, L, S] masks are per head.
  const Tensor hmask = randn({6, 5, 7}, TensorOptions(kFloat64));
  check_close(m.forward(x, kv, kv, hmask), mha_ref(m, x, kv, hmask.reshape({3, 2, 5, 7}), false));
  // Sequence-first gives the same numbers transposed.
  manual_seed(21);
  nn::MultiheadAttention s(8, 2, {.batch_first = false});
  s.to(kFloat64);
  s.load_state_dict(m.state_dict());
  check_close(s.forward(x.transpose(0, 1)).transpose(0, 1), m.forward(x));
  check_error([&] { nn::MultiheadAttention(10, 3); }, {"[MultiheadAttention]", "multiple of num_heads"});
  check_error([&] { m.forward(randn({3, 5, 6}, TensorOptions(kFloat64))); }, {"[MultiheadAttention]", "E = 8"});
  check_error(
      [&] {
        m.forward(x, kv, kv, randn({5, 5}, TensorOptions(kFloat64)));
      },
      {"[MultiheadAttention]", "attn_mask"});
}

TEST_CASE("MultiheadAttention gradients: gradcheck of the input, parameter gradients against the composite") {
  manual_seed(22);
  nn::MultiheadAttention m(4, 2);
  m.to(kFloat64);
  CHECK(autograd::gradcheck([&](const TensorList& t) { return m.forward(t[0], t[0], t[0], Tensor(), true); },
                            {randn({2, 3, 4}, TensorOptions(kFloat64))}));
  const Tensor x = randn({2, 3, 4}, TensorOptions(kFloat64));
  m.forward(x).pow(2.0).sum().backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : m.parameters()) grads.push_back(p.grad().clone());
  m.zero_grad();
  mha_ref(m, x, x, Tensor(), false).pow(2.0).sum().backward();
  const TensorList params = m.parameters();
  REQUIRE(params.size() == 4);
  for (size_t i = 0; i < params.size(); ++i) check_close(grads[i], params[i].grad(), {1e-9, 1e-9});
}

TEST_CASE("TransformerEncoderLayer matches its composite, post-norm and pre-norm, relu and gelu") {
  for (bool norm_first : {false, true}) {
    for (const char* act : {"relu", "gelu"}) {
      CAPTURE(norm_first);
      manual_seed(23);
      nn::TransformerEncoderLayer layer(
          8, 2, {.dim_feedforward = 16, .dropout = 0.1, .activation = act, .norm_first = norm_first});
      layer.to(kFloat64);
      layer.eval();  // dropout off
      const Tensor x = randn({2, 5, 8}, TensorOptions(kFloat64));
      auto ln = [&](nn::LayerNorm& n, const Tensor& t) { return layer_norm(t, {8}, n.weight, n.bias, 1e-5); };
      auto sa = [&](const Tensor& t) { return mha_ref(*layer.self_attn, t, t, Tensor(), true); };
      auto ff = [&](const Tensor& t) {
        const Tensor h = linear(t, layer.linear1->weight, layer.linear1->bias);
        return linear(std::string(act) == "gelu" ? h.gelu() : h.relu(), layer.linear2->weight, layer.linear2->bias);
      };
      Tensor ref;
      if (norm_first) {
        const Tensor h = x + sa(ln(*layer.norm1, x));
        ref = h + ff(ln(*layer.norm2, h));
      } else {
        const Tensor h = ln(*layer.norm1, x + sa(x));
        ref = ln(*layer.norm2, h + ff(h));
      }
      check_close(layer.forward(x, Tensor(), true), ref);
      CHECK(autograd::gradcheck([&](const TensorList& t) { return layer.forward(t[0], Tensor(), true); },
                                {randn({1, 3, 8}, TensorOptions(kFloat64))}));
    }
  }
  const auto names = [] {
    nn::TransformerEncoderLayer l(8, 2, {.dim_feedforward = 16});
    std::vector<std::string> n;
    for (auto& [name, t] : l.named_parameters()) n.push_back(name);
    return n;
  }();
  CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                          "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                          "norm1.bias", "norm2.weight", "norm2.bias"});
  check_error([] { nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16, .activation = "tanh"}); },
              {"[TransformerEncoderLayer]", "activation"});
}
