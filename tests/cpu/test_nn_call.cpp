// Calling modules as PyTorch users do: module(args...) with hooks for multi-input layers, typed
// access in Sequential, the short constructor spellings and every module's options aggregate.
#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// A user's module whose forward takes a mask too.
struct Masked : nn::CallableModule<Masked> {
  Masked() : CallableModule("Masked") {}
  Tensor forward(const Tensor& x) override { return x; }
  Tensor forward(const Tensor& x, const Tensor& mask, double fill = 0.0) { return masked_fill(x, mask, fill); }
};
}  // namespace

TEST_CASE("module(args...) runs the forward hooks around a multi-input forward") {
  manual_seed(0);
  nn::MultiheadAttention mha(8, 2);
  const Tensor q = randn({2, 3, 8}), k = randn({2, 5, 8}), v = randn({2, 5, 8});
  check_close(mha(q, k, v), mha.forward(q, k, v), {0, 0});
  int calls = 0;
  RemovableHandle pre = mha.register_forward_pre_hook([&](nn::Module&, const Tensor& in) -> std::optional<Tensor> {
    ++calls;
    return in * 2.0;  // the first argument (the query) is the input a hook sees
  });
  RemovableHandle post = mha.register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return out + 1.0; });
  check_close(mha(q, k, v), mha.forward(q * 2.0, k, v) + 1.0, {1e-6, 1e-6});
  CHECK(calls == 1);
  pre.remove();
  post.remove();

  // A transformer layer with a mask; the layer calls its submodules, so their hooks run too
  // (as in PyTorch, where a hook on layer.linear1 sees every call).
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  const Tensor src = randn({2, 3, 8});
  const Tensor mask = triu(ones({3, 3}, kBool), 1);
  int inner = 0;
  RemovableHandle h =
      layer.linear1->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) -> std::optional<Tensor> {
        ++inner;
        return std::nullopt;
      });
  check_close(layer(src, mask), layer.forward(src, Tensor(), /*is_causal=*/true), {1e-6, 1e-6});
  check_close(layer(src), layer.forward(src), {0, 0});
  CHECK(inner == 4);

  Masked m;
  const Tensor x = ones({2, 2});
  const Tensor keep = tensor(std::vector<float>{1, 0, 0, 1}, {2, 2}).to(kBool);
  check_close(m(x, keep, 5.0), tensor(std::vector<float>{5, 1, 1, 5}, {2, 2}), {0, 0});
  RemovableHandle neg =
      m.register_forward_pre_hook([](nn::Module&, const Tensor& in) -> std::optional<Tensor> { return -in; });
  check_close(m(x, keep), tensor(std::vector<float>{0, -1, -1, 0}, {2, 2}), {0, 0});
  check_close(m(x), -x, {0, 0});
}

TEST_CASE("Sequential: get<T>(i), nn::sequential and the variadic constructor") {
  auto seq = nn::sequential(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                            std::make_shared<nn::Linear>(8, 2));
  CHECK(seq->size() == 3);
  CHECK(seq->get<nn::Linear>(2)->weight.shape() == Shape{2, 8});
  CHECK(seq->get<nn::Module>(1) != nullptr);
  check_error([&] { seq->get<nn::Linear>(1); }, {"[Sequential]", "get<hg::nn::Linear>(1)", "module 1 is a ReLU"});
  check_error([&] { seq->get<nn::Linear>(3); }, {"[Sequential]", "no module 3 (there are 3)"});
  nn::Sequential direct(std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::GELU>());
  CHECK(direct.named_parameters().front().first == "0.weight");
}

TEST_CASE("constructor spellings: LayerNorm(64), options aggregates") {
  nn::LayerNorm ln(64);
  CHECK(ln.weight.shape() == Shape{64});
  CHECK(nn::LayerNorm({8, 64}).weight.shape() == Shape{8, 64});
  CHECK(nn::LayerNorm(64, {.eps = 1e-6, .elementwise_affine = false}).parameters().empty());
  CHECK(fmt::format("{}", nn::LayerNorm(4, {.eps = 1e-6})) ==
        "LayerNorm([4], eps=1e-06, elementwise_affine=true)  # 8 parameters");

  CHECK(nn::Linear(784, 512, {.bias = false}).parameters().size() == 1);
  nn::BatchNorm2d bn(3, {.eps = 1e-3, .momentum = 0.2, .affine = false});
  CHECK(bn.parameters().empty());
  CHECK(bn.extra_repr() == "3, eps=0.001, momentum=0.2, affine=false, track_running_stats=true");
  CHECK(nn::BatchNorm2d(3, {.track_running_stats = false}).buffers().empty());
  CHECK(nn::GroupNorm(2, 4, {.eps = 1e-3}).extra_repr() == "2, 4, eps=0.001, affine=true");
  CHECK(nn::Dropout({.p = 0.2}).extra_repr() == "p=0.2");
  CHECK(nn::Dropout(0.3).extra_repr() == "p=0.3");
  CHECK(nn::GELU({.approximate = "tanh"}).extra_repr() == "approximate='tanh'");
  CHECK(nn::MultiheadAttention(8, 2, {.dropout = 0.1, .bias = false, .batch_first = false}).extra_repr() ==
        "embed_dim=8, num_heads=2, dropout=0.1, batch_first=false");
  nn::TransformerEncoderLayer pre(8, 2, {.dim_feedforward = 32, .activation = "gelu", .norm_first = true});
  CHECK(pre.linear1->weight.shape() == Shape{32, 8});
  CHECK(nn::Conv2d(3, 4, 3, {.padding = {1, 1}, .bias = false}).parameters().size() == 1);

  check_error([] { nn::GELU({.approximate = "fast"}); }, {"[GELU]", "approximate", "fast"});
  check_error([] { nn::BatchNorm2d(3, {.momentum = 1.5}); }, {"[BatchNorm2d]", "momentum", "1.5"});
  check_error([] { nn::BatchNorm2d(3, {.eps = 0}); }, {"[BatchNorm2d]", "eps"});
  check_error([] { nn::LayerNorm(0); }, {"[LayerNorm]", "positive"});
  check_error([] { nn::Dropout({.p = -0.1}); }, {"[Dropout]", "probability"});
}

TEST_CASE("Embedding padding_idx: a zero row that gets no gradient, as PyTorch's") {
  manual_seed(0);
  nn::Embedding emb(4, 2, {.padding_idx = -1});
  CHECK(emb.extra_repr() == "4, 2, padding_idx=3");  // PyTorch's repr, the index made positive
  check_close(emb.weight.select(0, 3), zeros({2}), {0, 0});
  {
    NoGradGuard no_grad;
    emb.weight.select(0, 3).fill_(7.0);  // a padding row may be set by hand; lookups read it
  }
  const Tensor idx = tensor(std::vector<int64_t>{3, 0, 3, 1}, {2, 2});
  const Tensor out = emb(idx);
  check_close(out.select(0, 0).select(0, 0), full({2}, 7.0), {0, 0});
  (out * 2.0).sum().backward();
  // PyTorch: grad rows 0 and 1 are 2 (each looked up once), row 3 (padding) and row 2 are 0.
  // The literal's shape is the one GCC 12.2 with AVX-512 got wrong (eight 2s) before meson.build's
  // vector-constant probe added its workaround: it stays as a check of that workaround.
  check_close(emb.weight.grad(), tensor(std::vector<float>{2, 2, 2, 2, 0, 0, 0, 0}, {4, 2}), {0, 0});
  check_error([] { nn::Embedding(4, 2, {.padding_idx = 4}); }, {"[Embedding]", "padding_idx 4"});
}
