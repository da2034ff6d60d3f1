// The fused transformer layers (issue 41 item 5) against the compositions they replace:
// linear_gelu_linear against linear -> gelu(tanh) -> linear, add_layer_norm against x + residual
// then layer_norm (then, in an autocast region, the cast the next linear would make). On the CPU
// both run the composition's own kernels, so values and gradients match bit for bit.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {

struct MlpParams {
  Tensor x, w1, b1, w2, b2;
};

MlpParams mlp_params(const Shape& x_shape, int64_t hidden, int64_t out, bool biases) {
  const int64_t in = x_shape.back();
  MlpParams p;
  p.x = randn(x_shape).requires_grad_();
  p.w1 = (randn({hidden, in}) * 0.3).requires_grad_();
  p.w2 = (randn({out, hidden}) * 0.3).requires_grad_();
  if (biases) {
    p.b1 = randn({hidden}).requires_grad_();
    p.b2 = randn({out}).requires_grad_();
  }
  return p;
}

// The output and every gradient, under a weighted sum (so each output element's gradient differs).
std::vector<Tensor> mlp_results(const MlpParams& p, bool fused, std::optional<Dtype> autocast = std::nullopt) {
  MlpParams q;
  const std::pair<Tensor*, const Tensor*> pairs[] = {
      {&q.x, &p.x}, {&q.w1, &p.w1}, {&q.b1, &p.b1}, {&q.w2, &p.w2}, {&q.b2, &p.b2}};
  for (const auto& [dst, src] : pairs) *dst = src->defined() ? src->detach().clone().requires_grad_() : Tensor();
  Tensor y;
  {
    amp::AutocastGuard guard(kCPU, autocast, autocast.has_value());
    y = fused ? linear_gelu_linear(q.x, q.w1, q.b1, q.w2, q.b2)
              : linear(gelu(linear(q.x, q.w1, q.b1), true), q.w2, q.b2);
  }
  const Tensor weights = arange(static_cast<double>(y.numel())).reshape(y.shape()).to(y.dtype()) * 0.01;
  (y * weights).sum().backward();
  std::vector<Tensor> r = {y, q.x.grad(), q.w1.grad(), q.w2.grad()};
  if (q.b1.defined()) r.insert(r.end(), {q.b1.grad(), q.b2.grad()});
  return r;
}

}  // namespace

TEST_CASE("linear_gelu_linear gives linear -> gelu(tanh) -> linear's values and gradients, bit for bit on the CPU") {
  manual_seed(31);
  for (const bool biases : {true, false}) {
    CAPTURE(biases);
    const MlpParams p = mlp_params({2, 5, 12}, 24, 7, biases);
    const auto fused = mlp_results(p, true), plain = mlp_results(p, false);
    REQUIRE(fused.size() == plain.size());
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(fused[i].shape() == plain[i].shape());
      CHECK(fused[i].to_vector<float>() == plain[i].to_vector<float>());
    }
  }
}

TEST_CASE("linear_gelu_linear under bfloat16 autocast: lower precision as linear, the composition's values") {
  manual_seed(32);
  const MlpParams p = mlp_params({6, 16}, 32, 8, true);
  const auto fused = mlp_results(p, true, kBFloat16), plain = mlp_results(p, false, kBFloat16);
  CHECK(fused[0].dtype() == kBFloat16);
  CHECK(fused[2].dtype() == kFloat32);  // the float32 weight's gradient, through the cast
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    check_close(fused[i].to(kFloat32), plain[i].to(kFloat32), {1e-6, 1e-2});
  }
}

TEST_CASE("linear_gelu_linear gradients and second derivatives match finite differences") {
  const auto f = [](const TensorList& v) { return linear_gelu_linear(v[0], v[1], v[2], v[3], v[4]); };
  const TensorList in = {randn({3, 4}, kFloat64), randn({6, 4}, kFloat64), randn({6}, kFloat64),
                         randn({2, 6}, kFloat64), randn({2}, kFloat64)};
  CHECK(autograd::gradcheck(f, in));
  CHECK(autograd::gradgradcheck(f, in));
}

TEST_CASE("linear_gelu_linear refuses mismatched operands, naming itself") {
  const Tensor x = randn({3, 4}), w1 = randn({6, 4}), b1 = randn({6}), w2 = randn({2, 6}), b2 = randn({2});
  check_error([&] { linear_gelu_linear(randn({3, 5}), w1, b1, w2, b2); }, {"[linear_gelu_linear]", "in_features 4"});
  check_error([&] { linear_gelu_linear(x, w1, b1, randn({2, 5}), b2); }, {"[linear_gelu_linear]", "6 outputs"});
  check_error([&] { linear_gelu_linear(x, w1, randn({5}), w2, b2); }, {"[linear_gelu_linear]", "fc_bias", "[6]"});
  check_error([&] { linear_gelu_linear(x, w1, b1, w2, randn({3})); }, {"[linear_gelu_linear]", "proj_bias", "[2]"});
  check_error([&] { linear_gelu_linear(x, w1.to(kFloat64), b1, w2, b2); }, {"[linear_gelu_linear]", "dtype"});
  check_error([&] { linear_gelu_linear(x, Tensor(), b1, w2, b2); }, {"[linear_gelu_linear]", "undefined"});
  check_error([&] { linear_gelu_linear(x, randn({6, 4, 1}), b1, w2, b2); }, {"[linear_gelu_linear]", "2-d"});
}

namespace {

struct NormRun {
  Tensor sum, normalized, gx, gr, gw, gb;
};

NormRun add_norm_run(const Tensor& x0, const Tensor& r0, const Tensor& w0, const Tensor& b0, bool fused,
                     std::optional<Dtype> autocast = std::nullopt) {
  Tensor x = x0.detach().clone().requires_grad_(), r = r0.detach().clone().requires_grad_();
  Tensor w = w0.detach().clone().requires_grad_(), b = b0.detach().clone().requires_grad_();
  NormRun out;
  {
    amp::AutocastGuard guard(kCPU, autocast, autocast.has_value());
    if (fused) {
      const AddLayerNorm res = add_layer_norm(x, r, {x0.size(-1)}, w, b);
      out.sum = res.sum;
      out.normalized = res.normalized;
    } else {
      out.sum = x + r;
      out.normalized = layer_norm(out.sum, {x0.size(-1)}, w, b);
      if (autocast) out.normalized = out.normalized.to(*autocast);  // what the next linear does
    }
  }
  const Tensor ws = arange(static_cast<double>(out.sum.numel())).reshape(out.sum.shape()) * 0.01;
  ((out.sum * ws).sum() + (out.normalized.to(kFloat32) * (ws * ws)).sum()).backward();
  out.gx = x.grad(), out.gr = r.grad(), out.gw = w.grad(), out.gb = b.grad();
  return out;
}

void check_same_run(const NormRun& a, const NormRun& b) {
  const std::pair<Tensor, Tensor> pairs[] = {
      {a.sum, b.sum}, {a.normalized, b.normalized}, {a.gx, b.gx}, {a.gr, b.gr}, {a.gw, b.gw}, {a.gb, b.gb}};
  for (const auto& [got, want] : pairs) {
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(got.to(kFloat64).to_vector<double>() == want.to(kFloat64).to_vector<double>());
  }
}

}  // namespace

TEST_CASE("add_layer_norm gives x + residual and layer_norm's values and gradients, bit for bit on the CPU") {
  manual_seed(33);
  const Tensor x = randn({2, 3, 10}), r = randn({2, 3, 10}) * 2.0, w = randn({10}), b = randn({10});
  check_same_run(add_norm_run(x, r, w, b, true), add_norm_run(x, r, w, b, false));
  // A bfloat16 branch output added to a float32 residual stream: the sum is float32.
  const NormRun mixed = add_norm_run(x.to(kBFloat16), r, w, b, true);
  CHECK(mixed.sum.dtype() == kFloat32);
  CHECK(mixed.gx.dtype() == kBFloat16);
  check_same_run(mixed, add_norm_run(x.to(kBFloat16), r, w, b, false));
}

TEST_CASE("add_layer_norm in a bfloat16 region writes the normalised output in bfloat16, as the next linear's cast") {
  manual_seed(34);
  const Tensor x = randn({4, 16}), r = randn({4, 16}), w = randn({16}), b = randn({16});
  const NormRun fused = add_norm_run(x, r, w, b, true, kBFloat16);
  CHECK(fused.normalized.dtype() == kBFloat16);
  CHECK(fused.sum.dtype() == kFloat32);
  check_same_run(fused, add_norm_run(x, r, w, b, false, kBFloat16));
  // And what the region's linear then reads: no second cast.
  Tensor lw = randn({5, 16});
  amp::AutocastGuard guard(kCPU, kBFloat16);
  OpRecorder rec;
  const AddLayerNorm res = add_layer_norm(x, r, {16}, w, b);
  (void)linear(res.normalized, lw);
  for (const OpEvent& e : rec.events())
    if (e.name == "linear") CHECK(e.inputs[0] == kBFloat16);
  CHECK(rec.count("to") == 1u);  // the weight's cast only
}

TEST_CASE("add_layer_norm gradients match finite differences; its backward is not differentiated again") {
  const auto f = [](const TensorList& v) {
    const AddLayerNorm res = add_layer_norm(v[0], v[1], {5}, v[2], v[3]);
    return cat({res.sum.flatten(), (res.normalized * 3.0).flatten()});
  };
  CHECK(autograd::gradcheck(
      f, {randn({3, 5}, kFloat64), randn({3, 5}, kFloat64), randn({5}, kFloat64), randn({5}, kFloat64)}));
  Tensor x = randn({2, 5}).requires_grad_();
  const AddLayerNorm res = add_layer_norm(x, randn({2, 5}), {5});
  check_error([&] { autograd::grad({res.normalized.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true); },
              {"[add_layer_norm]", "double backward is not supported"});
}

TEST_CASE("add_layer_norm refuses bad input, naming itself") {
  const Tensor x = randn({2, 5});
  check_error([&] { add_layer_norm(x, randn({1, 5}), {5}); }, {"[add_layer_norm]", "one shape"});
  check_error([&] { add_layer_norm(x, randn({2, 5}), {4}); }, {"[add_layer_norm]", "normalized_shape"});
  check_error([&] { add_layer_norm(x, randn({2, 5}), {5}, randn({4})); }, {"[add_layer_norm]", "weight", "[5]"});
  check_error([&] { add_layer_norm(x, randn({2, 5}), {}); }, {"[add_layer_norm]", "at least one dim"});
  check_error([&] { add_layer_norm(x, Tensor(), {5}); }, {"[add_layer_norm]", "undefined"});
  check_error([&] { add_layer_norm(x, randint(0, 3, {2, 5}), {5}); }, {"[add_layer_norm]", "floating-point"});
}
