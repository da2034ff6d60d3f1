// Higher-order gradients: create_graph, gradgradcheck over every differentiable op, the ops that
// refuse double backward, and double backward under autocast.
#include <set>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// The ops whose backward runs a raw kernel: create_graph through them is refused. docs/GUIDE.md
// (Autograd) lists the same ops; the test below fails when the registry's flags disagree.
const std::set<std::string> kNoDoubleBackward = {
    "avg_pool2d", "batch_norm", "conv2d",   "cross_entropy",
    "layer_norm", "max_pool2d", "nll_loss", "scaled_dot_product_attention"};

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

TEST_CASE("ops whose backward runs a raw kernel refuse create_graph, and the list is complete") {
  std::set<std::string> flagged;
  for (const OpDef* op : op_registry())
    if (op->differentiable && !op->double_differentiable) flagged.insert(op->name);
  CHECK(flagged == kNoDoubleBackward);

  manual_seed(2);
  const Tensor x = randn({2, 3, 4, 4}).requires_grad_();
  const Tensor logits = randn({3, 4}).requires_grad_();
  const Tensor target = tensor(std::vector<int64_t>{1, 0, 3});
  const struct {
    const char* name;
    std::function<Tensor()> fn;
  } cases[] = {
      {"cross_entropy", [&] { return cross_entropy(logits, target); }},
      {"nll_loss", [&] { return nll_loss(logits, target); }},
      {"layer_norm", [&] { return layer_norm(x, {4}).sum(); }},
      {"batch_norm", [&] { return batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).pow(2.0).sum(); }},
      {"conv2d",
       [&] {
         return conv2d(x, randn({2, 3, 3, 3})).sum();
       }},
      {"max_pool2d", [&] { return max_pool2d(x, {2}).sum(); }},
      {"avg_pool2d", [&] { return avg_pool2d(x, {2}).sum(); }},
      {"scaled_dot_product_attention", [&] { return scaled_dot_product_attention(x, x, x).sum(); }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const Tensor in =
        std::string(c.name).find("entropy") != std::string::npos || std::string(c.name) == "nll_loss" ? logits : x;
    check_error([&] { autograd::grad({c.fn()}, {in}, {}, std::nullopt, /*create_graph=*/true); },
                {fmt::format("[{}] double backward is not supported", c.name)});
    // Without create_graph the same graph backpropagates.
    CHECK(autograd::grad({c.fn()}, {in})[0].defined());
  }
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
