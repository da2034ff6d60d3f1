// Higher-order gradients: create_graph, gradgradcheck over every differentiable op, the ops that
// refuse double backward, and double backward under autocast.
#include <set>

#include "framework/op.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// The ops whose second derivative is not defined (OpDef::double_differentiable = false; they
// refuse create_graph with "[op] double backward is not supported"). docs/GUIDE.md (Autograd)
// says which; the test below fails when the registry's flags disagree.
// cross_entropy_fused_ overwrites its logits with their gradient, so nothing is left to
// differentiate the gradient against.
// The recurrence ops (nn::LSTM, GRU, RNN) run their backward time loop on raw kernels.
// add_layer_norm's backward calls layer_norm's backward kernel directly.
const std::set<std::string> kNoDoubleBackward = {"add_layer_norm",  "cross_entropy_fused_",      "gru_recurrence",
                                                 "lstm_recurrence", "lstm_projected_recurrence", "rnn_recurrence"};

Tensor f64(std::vector<double> v, const Shape& shape) { return tensor(v, shape); }
}  // namespace

TEST_CASE("second derivative of x^3 is 6x (grad twice, and backward with create_graph)") {
  Tensor x = f64({-1.5, 0.5, 2.0}, {3}).requires_grad_();
  Tensor y = (x * x * x).sum();
  TensorList g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  REQUIRE(g[0].grad_fn() != nullptr);
  check_close(g[0], f64({6.75, 0.75, 12.0}, {3}), {1e-12, 1e-12});  // 3x^2
  TensorList gg = autograd::grad({g[0].sum()}, {x});
  check_close(gg[0], f64({-9.0, 3.0, 12.0}, {3}), {1e-12, 1e-12});  // 6x

  // pow goes through the same machinery (its formula is pow(x, 2) * 3).
  Tensor x2 = f64({-1.5, 0.5, 2.0}, {3}).requires_grad_();
  x2.pow(3.0).sum().backward({}, std::nullopt, /*create_graph=*/true);
  REQUIRE(x2.grad().grad_fn() != nullptr);  // .grad has a history
  const Tensor first = x2.grad();
  x2.set_grad(Tensor());
  first.sum().backward();
  check_close(x2.grad(), f64({-9.0, 3.0, 12.0}, {3}), {1e-12, 1e-12});
}

TEST_CASE("create_graph: retain_graph defaults to it, and accumulation into .grad is out of place") {
  Tensor x = f64({1.0, 2.0}, {2}).requires_grad_();
  Tensor y = (x.exp() * x).sum();
  y.backward({}, std::nullopt, true);
  const Tensor g1 = x.grad();
  REQUIRE(g1.grad_fn() != nullptr);
  y.backward({}, std::nullopt, true);  // the graph was retained
  const Tensor g2 = x.grad();
  CHECK_FALSE(g1.is_same(g2));
  CHECK(g2.grad_fn() != nullptr);
  check_close(g1 * 2.0, g2, {1e-12, 1e-12});  // g1 itself was not modified
  // Without create_graph the graph is freed by default.
  Tensor z = (x * x).sum();
  z.backward();
  check_error([&] { z.backward(); }, {"second time"});
}

TEST_CASE("gradient penalty d/dx, d/dW of ||d tanh(xW)/dx||^2 matches PyTorch") {
  // PyTorch 2.x (Debian python3-torch), float64:
  //   out = tanh(x @ W).sum(); g, = autograd.grad(out, x, create_graph=True); (g*g).sum().backward()
  Tensor x = f64({0.5, -1.0, 0.3, 0.2, 0.4, -0.6}, {2, 3}).requires_grad_();
  Tensor w = f64({0.1, -0.2, 0.3, 0.4, 0.5, 0.6, -0.7, 0.8, -0.9, 1.0, 0.2, -0.3}, {3, 4}).requires_grad_();
  Tensor out = tanh(mm(x, w)).sum();
  TensorList g = autograd::grad({out}, {x}, {}, std::nullopt, /*create_graph=*/true);
  Tensor gp = (g[0] * g[0]).sum();
  CHECK(gp.item<double>() == doctest::Approx(1.9931646710393944).epsilon(1e-12));
  gp.backward();
  check_close(x.grad(),
              f64({0.6246201946148603, 1.3449625226627604, 0.25132154547435565, -0.7447894279252819,
                   -0.19109914254865165, 1.3231907402541327},
                  {2, 3}),
              {1e-12, 1e-10});
  check_close(w.grad(),
              f64({1.1023574706914874, 1.9171107911433443, 1.3931563237122853, 1.468187048260695, 1.505744351599907,
                   2.395018908637186, 1.3717239960761742, 0.6522504279491941, 0.8997927082241586, 0.6129223075092642,
                   1.1833830688629217, 1.7117882053935938},
                  {3, 4}),
              {1e-12, 1e-10});
}

TEST_CASE("log_softmax double backward matches PyTorch") {
  // PyTorch: gz, = grad(log_softmax(z, 1), z, v, create_graph=True); (gz*gz).sum().backward()
  Tensor z = f64({0.3, -0.2, 0.9, 1.1, 0.0, -0.5}, {2, 3}).requires_grad_();
  const Tensor v = f64({1.0, 2.0, -1.0, 0.5, -0.5, 3.0}, {2, 3});
  TensorList gz = autograd::grad({log_softmax(z, 1)}, {z}, {v}, std::nullopt, true);
  (gz[0] * gz[0]).sum().backward();
  check_close(z.grad(),
              f64({-1.2835745815346136, -1.64853835623279, 2.9321129377674033, 2.345765762720567, 0.3851935494028037,
                   -2.73095931212337},
                  {2, 3}),
              {1e-12, 1e-10});
}

TEST_CASE("Hessian-vector product of a small MLP matches finite differences of its gradient") {
  manual_seed(11);
  const Tensor x = randn({5, 3}, kFloat64);
  const Tensor target = randn({5, 2}, kFloat64);
  TensorList params = {randn({4, 3}, kFloat64) * 0.7, randn({4}, kFloat64) * 0.1, randn({2, 4}, kFloat64) * 0.7,
                       randn({2}, kFloat64) * 0.1};
  for (Tensor& p : params) p.requires_grad_();
  auto loss_of = [&](const TensorList& p) {
    Tensor h = gelu(linear(x, p[0], p[1]));
    return mse_loss(linear(tanh(h), p[2], p[3]), target);
  };
  TensorList dirs;
  for (const Tensor& p : params) dirs.push_back(randn(p.shape(), kFloat64));

  TensorList g = autograd::grad({loss_of(params)}, params, {}, std::nullopt, /*create_graph=*/true);
  Tensor gv;
  for (size_t i = 0; i < g.size(); ++i) gv = gv.defined() ? gv + (g[i] * dirs[i]).sum() : (g[i] * dirs[i]).sum();
  TensorList hvp = autograd::grad({gv}, params);

  // (grad(p + e d) - grad(p - e d)) / 2e
  const double eps = 1e-6;
  auto grad_at = [&](double sign) {
    TensorList p;
    for (size_t i = 0; i < params.size(); ++i)
      p.push_back((params[i].detach() + dirs[i] * (sign * eps)).requires_grad_());
    return autograd::grad({loss_of(p)}, p);
  };
  const TensorList plus = grad_at(1.0), minus = grad_at(-1.0);
  for (size_t i = 0; i < params.size(); ++i) check_close(hvp[i], (plus[i] - minus[i]) / (2 * eps), {1e-7, 1e-5});
}

TEST_CASE("gradgradcheck passes for every differentiable op whose second derivative is defined") {
  using autograd::gradgradcheck;
  manual_seed(3);
  auto r = [](const Shape& s) { return randn(s); };
  auto pos = [](const Shape& s) { return rand(s) + 0.5; };
  const Tensor idx = tensor(std::vector<int64_t>{2, 0, 2}, {3});
  const Tensor idx2 = tensor(std::vector<int64_t>{0, 2, 1, 1, 0, 2}, {2, 3});
  const Tensor cond = tensor(std::vector<double>{1, 0, 0, 1, 1, 0}, {2, 3}) > 0.5;

  // Elementwise
  CHECK(gradgradcheck([](const TensorList& x) { return x[0] + x[1] * x[1]; }, {r({2, 3}), r({3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return add(x[0] * x[0], x[1], 2.5); }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return sub(x[0] * x[0], x[1], 0.5) * x[1]; }, {r({2, 3}), r({3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return x[0] * x[1]; }, {r({2, 3}), r({2, 1})}));
  CHECK(gradgradcheck([](const TensorList& x) { return x[0] / x[1]; }, {r({2, 3}), pos({3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return maximum(x[0], x[1]) * x[0]; }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return minimum(x[0], x[1]) * x[1]; }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return neg(x[0]) * x[0]; }, {r({4})}));
  for (auto fn : std::vector<Tensor (*)(const Tensor&)>{
           exp, sigmoid, tanh, erf, [](const Tensor& t) { return gelu(t); },
           [](const Tensor& t) { return gelu(t, true); }, [](const Tensor& t) { return softplus(t, 1.5, 1.0); }}) {
    CHECK(gradgradcheck([fn](const TensorList& x) { return fn(x[0]); }, {r({2, 3})}));
  }
  for (auto fn : std::vector<Tensor (*)(const Tensor&)>{log, log1p, sqrt, rsqrt, reciprocal,
                                                        [](const Tensor& t) { return pow(t, 2.5); }}) {
    CHECK(gradgradcheck([fn](const TensorList& x) { return fn(x[0]); }, {pos({2, 3})}));
  }
  CHECK(gradgradcheck([](const TensorList& x) { return abs(x[0]) * x[0]; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return relu(x[0]) * x[0]; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return clamp(x[0], -0.5, 0.6) * x[0]; }, {r({2, 3})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return where(cond, x[0] * x[0], x[1]); }, {r({2, 3}), r({3})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return masked_fill(x[0] * x[0], cond, 2.0); }, {r({2, 3})}));
  // Reductions, linear algebra, softmax
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).sum({1}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return max(x[0]) * x[0]; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return min(x[0]) * x[0]; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return max(x[0] * x[0], 1).first; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return mm(x[0], x[1]); }, {r({2, 3}), r({3, 4})}));
  CHECK(gradgradcheck([](const TensorList& x) { return bmm(x[0], x[1]); }, {r({2, 2, 3}), r({2, 3, 2})}));
  CHECK(gradgradcheck([](const TensorList& x) { return linear(x[0], x[1], x[2]); }, {r({2, 3}), r({4, 3}), r({4})}));
  CHECK(gradgradcheck([](const TensorList& x) { return softmax(x[0], 1); }, {r({2, 4})}));
  CHECK(gradgradcheck([](const TensorList& x) { return log_softmax(x[0], 0); }, {r({3, 2})}));
  // Losses
  CHECK(gradgradcheck([](const TensorList& x) { return mse_loss(x[0], x[1]); }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return l1_loss(x[0] * x[0], x[1]); }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return smooth_l1_loss(x[0] * x[0], x[1], Reduction::Sum, 0.7); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return huber_loss(x[0] * x[0], x[1], Reduction::None, 0.7); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return kl_div(x[0], sigmoid(x[1]), Reduction::BatchMean); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return kl_div(x[0], x[1], Reduction::Sum, true); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return binary_cross_entropy(sigmoid(x[0]), sigmoid(x[1])); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck(
      [](const TensorList& x) { return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), Reduction::Sum, x[2]); },
      {r({2, 3}), r({2, 3}), pos({3})}));
  // Views, copies, joins, indexing (their formulas are linear in the gradient: the output
  // gradient v carries the check, the square makes the input path count too)
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).view({3, 2}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).t().reshape({6}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).permute({2, 0, 1}); }, {r({2, 3, 2})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).slice(1, 0, 3, 2).select(0, 1); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).unsqueeze(0).expand({2, 2, 3}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).squeeze(1); }, {r({2, 1, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).t().contiguous(); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).clone(); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return (x[0] * x[0]).to(kFloat32).to(kFloat64); }, {r({2, 3})},
                      {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4}));
  CHECK(gradgradcheck([](const TensorList& x) { return cat({x[0] * x[0], x[1]}, 1); }, {r({2, 3}), r({2, 1})}));
  CHECK(gradgradcheck([](const TensorList& x) { return stack({x[0] * x[1], x[1]}, 0); }, {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return gather(x[0] * x[0], 1, idx2); }, {r({2, 3})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return scatter_add(x[0], 1, idx2, x[1] * x[1]); },
                      {r({2, 3}), r({2, 3})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return index_select(x[0] * x[0], 1, idx); }, {r({2, 3})}));
  CHECK(
      gradgradcheck([&](const TensorList& x) { return index_add(x[0], 0, idx, x[1] * x[1]); }, {r({3, 2}), r({3, 2})}));
  CHECK(gradgradcheck([&](const TensorList& x) { return embedding(x[0] * x[0], idx); }, {r({3, 2})}));
  // Statistics, scans, sorting, triangles
  CHECK(gradgradcheck([](const TensorList& x) { return var(x[0], {1}); }, {r({2, 4})}));
  CHECK(gradgradcheck([](const TensorList& x) { return hg::std(x[0], {0}, 0.0); }, {r({3, 2})}));
  CHECK(gradgradcheck([](const TensorList& x) { return norm(x[0], 2.0, {1}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return norm(x[0] * x[0] * x[0], 1.0, {0}); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return cumsum(x[0] * x[0], 1); }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return sort(x[0] * x[0], 1).first; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return topk(x[0] * x[0], 2, 1).first; }, {r({2, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return tril(x[0] * x[0]); }, {r({3, 3})}));
  CHECK(gradgradcheck([](const TensorList& x) { return triu(x[0] * x[0], 1); }, {r({3, 4})}));
  CHECK(gradgradcheck(
      [](const TensorList& x) {
        manual_seed(5);  // the same mask every time fn runs
        return dropout(x[0] * x[0], 0.4);
      },
      {r({3, 4})}));
}

TEST_CASE("a wrong second derivative fails gradgradcheck, naming the variable") {
  // Its first derivative is right (gradcheck passes) but not differentiable: the formula uses
  // the saved input detached, so the second derivative misses the x path.
  struct Square : autograd::Function<Square> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
      ctx->save_for_backward({x});
      return x * x;
    }
    static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
      return {g[0] * ctx->saved()[0].detach() * 2.0};
    }
  };
  auto fn = [](const TensorList& in) { return Square::apply(in[0]); };
  CHECK(autograd::gradcheck(fn, {randn({3})}));
  check_error([&] { autograd::gradgradcheck(fn, {randn({3})}); }, {"[gradgradcheck]", "input 0"});
}

TEST_CASE("a custom Function's backward is differentiated again, through saved inputs and outputs") {
  struct ExpTimes : autograd::Function<ExpTimes> {  // y = exp(x) * s; saves its output
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double s) {
      Tensor y = exp(x) * s;
      ctx->save_for_backward({y});
      return y;
    }
    static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) { return {g[0] * ctx->saved()[0]}; }
  };
  CHECK(autograd::gradgradcheck([](const TensorList& in) { return ExpTimes::apply(in[0], 1.5); }, {randn({3})}));
  struct Cube : autograd::Function<Cube> {  // saves its input
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
      ctx->save_for_backward({x});
      return x * x * x;
    }
    static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
      const Tensor x = ctx->saved()[0];
      return {g[0] * x * x * 3.0};
    }
  };
  CHECK(autograd::gradgradcheck([](const TensorList& in) { return Cube::apply(in[0]); }, {randn({3})}));
}

TEST_CASE("the ops flagged as refusing create_graph are exactly the listed ones, and they refuse it") {
  std::set<std::string> flagged;
  for (const OpDef* op : op_registry())
    if (op->differentiable && !op->double_differentiable) flagged.insert(op->name);
  CHECK(flagged == kNoDoubleBackward);
  Tensor w = randn({5, 3}).requires_grad_();
  const Tensor loss = cross_entropy_fused_(linear(randn({2, 3}), w), tensor(std::vector<int64_t>{0, 4}));
  check_error([&] { autograd::grad({loss}, {w}, {}, std::nullopt, /*create_graph=*/true); },
              {"[cross_entropy_fused_]", "double backward is not supported"});
}

TEST_CASE("cross_entropy and nll_loss double backward: gradgradcheck, and a Hessian-vector product from PyTorch") {
  using autograd::gradgradcheck;
  manual_seed(6);
  const Tensor t = tensor(std::vector<int64_t>{1, 4, -100, 0});
  const Tensor t3 = tensor(std::vector<int64_t>{0, 2, 1, 2, 2, 0}, {2, 3});
  CHECK(gradgradcheck([&](const TensorList& v) { return cross_entropy(v[0], t); }, {randn({4, 5})}));
  CHECK(gradgradcheck([&](const TensorList& v) { return cross_entropy(v[0], t, Reduction::Sum, -100, 0.3); },
                      {randn({4, 5})}));
  CHECK(
      gradgradcheck([&](const TensorList& v) { return cross_entropy(v[0], t3, Reduction::None); }, {randn({2, 3, 3})}));
  CHECK(gradgradcheck([&](const TensorList& v) { return nll_loss(log_softmax(v[0] * v[0], 1), t, Reduction::Mean); },
                      {randn({4, 5})}));
  CHECK(gradgradcheck([&](const TensorList& v) { return nll_loss(v[0] * v[0], t3, Reduction::None); },
                      {randn({2, 3, 3})}));

  // PyTorch 1.13, float64: x[i] = sin(0.4 + 1.7 i) as [4, 5], target {1, 4, -100, 0},
  // label_smoothing 0.2; g = grad(loss, x, create_graph); hvp = grad((g * v).sum(), x) with
  // v[i] = sin(2.2 + 1.7 i).
  auto values = [](double salt) {
    std::vector<double> v(20);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(salt + 1.7 * static_cast<double>(i));
    return tensor(v, {4, 5});
  };
  Tensor x = values(0.4).requires_grad_();
  const Tensor loss = cross_entropy(x, t, Reduction::Mean, -100, 0.2);
  check_close(loss, tensor(std::vector<double>{1.507820871226484}, Shape{}), {1e-12, 1e-12});
  const Tensor g = autograd::grad({loss}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  const Tensor hvp = autograd::grad({(g * values(2.2)).sum()}, {x})[0];
  check_close(hvp,
              tensor(std::vector<double>{0.05067748830036175,
                                         -0.08527486941648058,
                                         -0.018068064723948927,
                                         0.017927460133463167,
                                         0.03473798570660459,
                                         -0.05345459406510022,
                                         0.003206959332311462,
                                         0.05199380859372985,
                                         0.03188062767798813,
                                         -0.0336268015389292,
                                         0,
                                         0,
                                         0,
                                         0,
                                         0,
                                         0.04699402462971318,
                                         -0.07501723280246735,
                                         -0.006005754798468328,
                                         0.02858406751967655,
                                         0.005444895451545937},
                     {4, 5}),
              {1e-12, 1e-12});
}

TEST_CASE("layer_norm and batch_norm double backward (statistics differentiated too)") {
  using autograd::gradgradcheck;
  manual_seed(8);
  CHECK(gradgradcheck([](const TensorList& v) { return layer_norm(v[0], {4}, v[1], v[2]); },
                      {randn({3, 4}), randn({4}), randn({4})}));
  CHECK(gradgradcheck([](const TensorList& v) { return layer_norm(v[0] * v[0], {2, 3}); }, {randn({2, 2, 3})}));
  CHECK(gradgradcheck([](const TensorList& v) { return layer_norm(v[0], {3}, Tensor(), v[1]); },
                      {randn({3}), randn({3})}));
  CHECK(gradgradcheck(
      [](const TensorList& v) {
        return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], /*training=*/true, 0.1, 1e-5);
      },
      {randn({3, 2, 2, 2}), randn({2}), randn({2})}));
  CHECK(gradgradcheck(
      [](const TensorList& v) { return batch_norm(v[0] * v[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
      {randn({4, 3})}));
  const Tensor rm = randn({2}).to(kFloat64), rv = (rand({2}) + 0.5).to(kFloat64);
  CHECK(gradgradcheck(
      [&](const TensorList& v) { return batch_norm(v[0] * v[0], rm, rv, v[1], v[2], /*training=*/false); },
      {randn({3, 2, 2}), randn({2}), randn({2})}));
}

TEST_CASE("max_pool2d and avg_pool2d double backward") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(9);
  CHECK(gradgradcheck([](const TensorList& v) { return max_pool2d(v[0] * v[0], {2}); }, {randn({2, 2, 4, 5})}));
  CHECK(gradgradcheck([](const TensorList& v) { return max_pool2d(v[0] * v[0], {3}, {2}, {1}, {1}, true); },
                      {randn({2, 5, 6})}));
  CHECK(gradgradcheck([](const TensorList& v) { return avg_pool2d(v[0] * v[0], {2}); }, {randn({2, 2, 4, 5})}));
  CHECK(gradgradcheck([](const TensorList& v) { return avg_pool2d(v[0] * v[0], {3}, {2}, {1}, true, false); },
                      {randn({1, 2, 5, 6})}));
  // avg_pool2d_input_grad on its own, in the output gradient.
  auto input_grad = [](const TensorList& v) {
    GradModeGuard grad_on(true);
    Tensor x = v[0].detach().requires_grad_();
    return autograd::grad({avg_pool2d(x, {3}, {2}, {1}, true, false)}, {x}, {v[1]}, std::nullopt, true)[0];
  };
  CHECK(gradcheck(input_grad, {randn({1, 2, 5, 6}), randn({1, 2, 3, 4})}));
  CHECK(gradgradcheck(input_grad, {randn({1, 2, 5, 6}), randn({1, 2, 3, 4})}));
}

TEST_CASE("scaled_dot_product_attention double backward (no dropout), masks and causal") {
  using autograd::gradgradcheck;
  manual_seed(10);
  const Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 5, 4}), v = randn({1, 2, 5, 3});
  CHECK(gradgradcheck([](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, {q, k, v}));
  CHECK(gradgradcheck(
      [](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.3); },
      {randn({1, 1, 4, 2}), randn({1, 1, 4, 2}), randn({1, 1, 4, 3})}));
  const Tensor keep = tensor(std::vector<double>{1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1}, {3, 5}) > 0.5;
  CHECK(gradgradcheck([&](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep); },
                      {q, k, v}));
  CHECK(gradgradcheck([](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
                      {q, k, v, randn({3, 5})}));
  // With dropout the mask lives in the fused kernel: create_graph refuses, plain backward works.
  Tensor qd = randn({1, 1, 2, 2}).requires_grad_();
  check_error(
      [&] {
        autograd::grad({scaled_dot_product_attention(qd, qd, qd, Tensor(), 0.5).sum()}, {qd}, {}, std::nullopt, true);
      },
      {"[scaled_dot_product_attention] double backward with dropout_p > 0 is not supported"});
  CHECK(autograd::grad({scaled_dot_product_attention(qd, qd, qd, Tensor(), 0.5).sum()}, {qd})[0].defined());
}

TEST_CASE("conv2d double backward: gradgradcheck, and a gradient penalty that matches PyTorch") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(4);
  // Stride, padding, dilation, groups and bias; unbatched; each gradient op on its own.
  CHECK(gradgradcheck(
      [](const TensorList& v) {
        return conv2d(v[0], v[1], v[2], {2, 1}, {1}, {1, 2}, 2);
      },
      {randn({2, 4, 5, 6}), randn({4, 2, 2, 3}), randn({4})}));
  CHECK(gradgradcheck([](const TensorList& v) { return conv2d(v[0] * v[0], v[1]); },
                      {randn({2, 4, 4}), randn({3, 2, 2, 2})}));
  // (gradcheck evaluates fn with grad mode off; these need it on to take a gradient.)
  auto input_grad = [](const TensorList& v) {
    GradModeGuard grad_on(true);
    Tensor x = v[0].detach().requires_grad_();
    return autograd::grad({conv2d(x, v[1], Tensor(), {2}, {1})}, {x}, {v[2]}, std::nullopt, true)[0];
  };
  auto weight_grad = [](const TensorList& v) {
    GradModeGuard grad_on(true);
    Tensor w = v[1].detach().requires_grad_();
    return autograd::grad({conv2d(v[0], w, Tensor(), {2}, {1})}, {w}, {v[2]}, std::nullopt, true)[0];
  };
  const TensorList args = {randn({2, 2, 5, 5}), randn({3, 2, 3, 3}), randn({2, 3, 3, 3})};
  CHECK(gradcheck(input_grad, args));   // conv2d_input_grad, in the weight and the output gradient
  CHECK(gradcheck(weight_grad, args));  // conv2d_weight_grad, in the input and the output gradient
  CHECK(gradgradcheck(input_grad, args));
  CHECK(gradgradcheck(weight_grad, args));

  // WGAN-GP's penalty, computed by PyTorch 1.13 in float64 from the same values:
  // y = conv2d(x, w, b, stride (2, 1), padding 1, dilation (1, 2), groups 2);
  // g = grad(tanh(y).sum(), x, create_graph); gp = ((g.flatten(1).norm(dim=1) - 1)^2).mean().
  auto values = [](int64_t n, double salt, const Shape& shape) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(salt + 1.7 * static_cast<double>(i));
    return tensor(v, shape);
  };
  Tensor x = values(100, 0.3, {2, 2, 5, 5}).requires_grad_();
  Tensor w = values(36, 1.1, {4, 1, 3, 3}).requires_grad_();
  Tensor b = values(4, 2.0, {4}).requires_grad_();
  const Tensor y = conv2d(x, w, b, {2, 1}, {1}, {1, 2}, 2);
  const Tensor g = autograd::grad({tanh(y).sum()}, {x}, {}, std::nullopt, true)[0];
  const Tensor gp = pow(norm(g.flatten(1), 2.0, {1}) - 1.0, 2.0).mean();
  gp.backward();
  check_close(gp, tensor(std::vector<double>{1.6993119257641154}, Shape{}), {1e-12, 1e-12});
  check_close(
      b.grad(),
      tensor(std::vector<double>{2.4521848594999804, 2.43891976999336, -0.23315937974773848, -0.4301776287671374}),
      {1e-10, 1e-10});
  check_close(w.grad().flatten().narrow(0, 0, 6),
              tensor(std::vector<double>{0.2816425135075212, 0.08673358016152177, -0.19720917590735698,
                                         2.1764973709054596, -0.02925158911049741, -0.4071426030835105}),
              {1e-10, 1e-10});
  check_close(x.grad().flatten().narrow(0, 0, 6),
              tensor(std::vector<double>{-0.052069053739137346, 0.14337062274784887, 0.1519704532098023,
                                         0.022025423653483422, 0.012907941355779762, -0.153474741575952}),
              {1e-10, 1e-10});
  check_close(x.grad().sum(), tensor(std::vector<double>{-0.28104698513540954}, Shape{}), {1e-10, 1e-10});
}

TEST_CASE("double backward under autocast runs in the dtype the forward ran") {
  manual_seed(4);
  Tensor x = randn({4, 8}).requires_grad_();
  Tensor w = randn({8, 8}).requires_grad_();
  Tensor g;
  OpRecorder rec;
  {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    Tensor loss = tanh(mm(x, w)).to(kFloat32).sum();
    g = autograd::grad({loss}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  }
  REQUIRE(g.grad_fn() != nullptr);
  CHECK(g.dtype() == kFloat32);
  (g * g).sum().backward();  // outside the region: each node replays the state it was recorded under
  REQUIRE(w.grad().defined());
  size_t mms = 0;
  for (const OpEvent& e : rec.events()) {
    if (e.name != "mm") continue;
    ++mms;
    CAPTURE(e.backward);
    for (Dtype d : e.inputs) CHECK(d == kBFloat16);
  }
  CHECK(mms >= 4);  // the forward, the recorded formula, and the formula's own backward
  // The bf16 result agrees with float64 to bf16 precision.
  Tensor x64 = x.detach().to(kFloat64).requires_grad_(), w64 = w.detach().to(kFloat64).requires_grad_();
  Tensor g64 = autograd::grad({tanh(mm(x64, w64)).sum()}, {x64}, {}, std::nullopt, true)[0];
  (g64 * g64).sum().backward();
  const auto a = w.grad().to_vector<double>(), b = w64.grad().to_vector<double>();
  double scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i)
    scale = std::max(scale, std::abs(b[i])), err = std::max(err, std::abs(a[i] - b[i]));
  CHECK(err <= 0.05 * scale);
}
