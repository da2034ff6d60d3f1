// The tape: accumulation, retain_graph, grad(), retain_grad, detach, version checks, custom
// functions, dtype of arriving gradients.
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("gradients accumulate in leaves across backward calls") {
  Tensor w = tensor(std::vector<float>{1, 2, 3}).requires_grad_();
  (w * w).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  (w * 3.0).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(w.is_leaf());
  CHECK_FALSE((w * 2.0).is_leaf());
}

TEST_CASE("a tensor used twice gets the sum of both gradients; broadcasting is undone") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor b = tensor(std::vector<float>{10}).requires_grad_();
  ((x * x) + x + b).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 5});
  CHECK(b.grad().shape() == Shape{1});
  CHECK(b.grad().item<float>() == 2.0f);
}

TEST_CASE("backward twice needs retain_graph; non-scalar needs a gradient") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = (x.exp() * 2.0).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_error([&] { y.backward(); }, {"second time", "retain_graph"});
  Tensor z = x * 2.0;
  check_error([&] { z.backward(); }, {"[backward]", "scalar", "[2]"});
  z.backward(tensor(std::vector<float>{1, 0.5}));
  check_error([&] { ones({2}).sum().backward(); }, {"[backward]", "does not require grad"});
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor h = x * x;
  Tensor y = (h * 3.0).sum();
  TensorList g = autograd::grad({y}, {x, h});
  CHECK(g[0].to_vector<float>() == std::vector<float>{6, 12});
  CHECK(g[1].to_vector<float>() == std::vector<float>{3, 3});
  CHECK_FALSE(x.grad().defined());
  Tensor unused = ones({1}).requires_grad_();
  check_error([&] { autograd::grad({(x * 2.0).sum()}, {unused}); }, {"[grad]", "not used"});
}

TEST_CASE("retain_grad keeps a non-leaf's gradient; detach cuts the graph") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor h = x * 2.0;
  h.retain_grad();
  (h * h).sum().backward();
  CHECK(h.grad().to_vector<float>() == std::vector<float>{4, 8});
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
}

TEST_CASE("modifying a saved tensor in place makes backward throw naming the op") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor a = ones({2});
  Tensor y = (x * a).sum();
  a.add_(1.0);
  check_error([&] { y.backward(); }, {"[mul]", "modified in place"});
}

TEST_CASE("gradients arrive in each tensor's own dtype") {
  Tensor w = ones({2, 2}).requires_grad_();
  Tensor x = ones({3, 2}, kBFloat16);
  Tensor y = mm(x, w.to(kBFloat16));
  y.sum().backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>(4, 3.0f));
}

namespace {
struct Cube : autograd::Function<Cube> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double scale) {
    ctx->save_for_backward({x});
    ctx->data["scale"] = scale;
    return x * x * x * scale;
  }
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    const Tensor x = ctx->saved()[0];
    return {g[0] * x * x * (3.0 * std::any_cast<double>(ctx->data["scale"]))};
  }
};
}  // namespace

TEST_CASE("custom autograd functions") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor y = Cube::apply(x, 2.0);
  CHECK(y.to_vector<float>() == std::vector<float>{2, 16});
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 24});
  CHECK(autograd::gradcheck([](const TensorList& in) { return Cube::apply(in[0], 0.5); }, {randn({3})}));
}

TEST_CASE("NoGradGuard stops recording; requires_grad_ checks") {
  Tensor w = ones({2}).requires_grad_();
  {
    NoGradGuard ng;
    CHECK_FALSE((w * 2.0).requires_grad());
  }
  CHECK((w * 2.0).requires_grad());
  check_error([] { ones({2}, kInt64).requires_grad_(); }, {"[requires_grad_]", "int64"});
}

TEST_CASE("gradcheck catches a wrong formula") {
  struct Wrong : autograd::Function<Wrong> {
    static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * x; }
    static TensorList backward(autograd::AutogradContext*, const TensorList& g) { return {g[0]}; }
  };
  check_error([] { autograd::gradcheck([](const TensorList& in) { return Wrong::apply(in[0]); }, {randn({3})}); },
              {"[gradcheck]", "mismatch"});
}
