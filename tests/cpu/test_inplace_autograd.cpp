// In-place ops under autograd: every in-place op against finite differences (first and second
// derivatives), on tensors and on views of them, a composite against PyTorch's numbers, the
// leaf errors, the version check, and views whose base was written after they were made.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
Tensor doubles(std::vector<double> v, const Shape& shape) { return tensor(v, shape); }

// fn applied to a fresh non-leaf copy of x[0] (an in-place op cannot write a leaf).
using InPlace = std::function<void(Tensor&, const TensorList&)>;
std::function<Tensor(const TensorList&)> on_copy(InPlace op) {
  return [op](const TensorList& x) {
    Tensor y = x[0] * 1.0;
    op(y, x);
    return y * y;  // squared, so the second derivative of a linear op still checks something
  };
}
}  // namespace

TEST_CASE("every in-place op matches finite differences, first and second derivatives") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(11);
  const Tensor a = randn({2, 3}), b = randn({2, 3}), row = randn({3});
  const Tensor away = rand({2, 3}) + 0.5;  // bounded away from 0 for div_
  const Tensor mask = tensor(std::vector<double>{1, 0, 0, 1, 1, 0}, {2, 3}) > 0.5;
  const struct {
    const char* name;
    InPlace op;
    TensorList inputs;
    autograd::GradcheckOptions options = {};
  } cases[] = {
      {"add_", [](Tensor& y, const TensorList& x) { y.add_(x[1], 0.5); }, {a, row}},
      {"add_ scalar", [](Tensor& y, const TensorList&) { y.add_(2.0); }, {a}},
      {"sub_", [](Tensor& y, const TensorList& x) { y.sub_(x[1], 2.0); }, {a, b}},
      {"mul_", [](Tensor& y, const TensorList& x) { y.mul_(x[1]); }, {a, row}},
      {"mul_ scalar", [](Tensor& y, const TensorList&) { y.mul_(-3.0); }, {a}},
      {"div_", [](Tensor& y, const TensorList& x) { y.div_(x[1]); }, {a, away}},
      {"div_ scalar", [](Tensor& y, const TensorList&) { y.div_(4.0); }, {a}},
      {"+=", [](Tensor& y, const TensorList& x) { y += x[1]; }, {a, b}},
      {"-=", [](Tensor& y, const TensorList& x) { y -= x[1]; }, {a, b}},
      {"*=", [](Tensor& y, const TensorList& x) { y *= x[1]; }, {a, b}},
      {"/=", [](Tensor& y, const TensorList& x) { y /= x[1]; }, {a, away}},
      {"scalar compound",
       [](Tensor& y, const TensorList&) {
         ((y += 1.0) -= 0.5) *= 2.0;
         y /= 3.0;
       },
       {a}},
      {"copy_ (broadcast)", [](Tensor& y, const TensorList& x) { y.copy_(x[1]); }, {a, row}},
      {"copy_ (float32 source)",
       [](Tensor& y, const TensorList& x) { y.copy_(x[1].to(kFloat32)); },
       {a, b},
       {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4}},  // a wide step: the source is rounded to float32
      {"fill_", [](Tensor& y, const TensorList& x) { y.fill_(0.25).mul_(x[0]); }, {a}},
      {"zero_", [](Tensor& y, const TensorList& x) { y.zero_().add_(x[0]); }, {a}},
      {"relu_", [](Tensor& y, const TensorList&) { y.relu_(); }, {a}},
      {"clamp_", [](Tensor& y, const TensorList&) { y.clamp_(-0.5, 0.7); }, {a}},
      {"clamp_ min only", [](Tensor& y, const TensorList&) { y.clamp_(0.1, std::nullopt); }, {a}},
      {"masked_fill_", [&](Tensor& y, const TensorList&) { y.masked_fill_(mask, 3.0); }, {a}},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    CHECK(gradcheck(on_copy(c.op), c.inputs, c.options));
    CHECK(gradgradcheck(on_copy(c.op), c.inputs, c.options));
  }
}

TEST_CASE("in-place ops on views rewrite the base's history") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(12);
  const Tensor a = randn({3, 4}), w = randn({3, 2}), v = randn({4});
  const struct {
    const char* name;
    InPlace op;
    TensorList inputs;
  } cases[] = {
      {"narrow mul_", [](Tensor& y, const TensorList& x) { y.narrow(1, 0, 2).mul_(x[1]); }, {a, w}},
      {"select copy_", [](Tensor& y, const TensorList& x) { y.select(0, 1).copy_(x[1]); }, {a, v}},
      {"strided slice relu_", [](Tensor& y, const TensorList&) { y.slice(1, 0, 4, 2).relu_(); }, {a}},
      {"transpose view of view add_",
       [](Tensor& y, const TensorList& x) { y.t().narrow(0, 1, 2).add_(x[1].t().narrow(0, 0, 2), 2.0); },
       {a, a * 0.5}},
      {"reshape view zero_", [](Tensor& y, const TensorList&) { y.view({12}).narrow(0, 3, 5).zero_(); }, {a}},
      {"unsqueeze/squeeze clamp_",
       [](Tensor& y, const TensorList&) { y.unsqueeze(0).squeeze(0).select(0, 2).clamp_(-0.3, 0.3); },
       {a}},
      {"index_put_ with slices",
       [](Tensor& y, const TensorList& x) {
         using indexing::Slice;
         y.index_put_({Slice(0, 2), Slice(1, 3)}, x[1].narrow(0, 0, 2).narrow(1, 0, 2));
       },
       {a, w}},
      {"index_put_ with an int64 index",
       [](Tensor& y, const TensorList& x) {
         y.index_put_({indexing::Slice(), tensor(std::vector<int64_t>{3, 0})}, x[1]);
       },
       {a, w}},
      {"index_put_ with a bool mask",
       [](Tensor& y, const TensorList& x) { y.index_put_({x[0] > 0.0}, x[1].sum() * 0.5); },
       {a, w}},
      {"two writes through two views",
       [](Tensor& y, const TensorList& x) {
         y.narrow(0, 0, 2).mul_(x[1].narrow(0, 0, 2));
         y.narrow(1, 1, 2).div_(2.0);
       },
       {a, w.narrow(1, 0, 1).expand({3, 4}).contiguous()}},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    CHECK(gradcheck(on_copy(c.op), c.inputs));
    CHECK(gradgradcheck(on_copy(c.op), c.inputs));
  }

  // The example: the view's write shows in the base and in the base's gradient.
  Tensor x = doubles({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor y = x * 1.0;
  y.narrow(1, 0, 2).mul_(2);
  check_close(y, doubles({2, 4, 3, 8, 10, 6}, {2, 3}), {0, 0});
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "mul_");
  y.sum().backward();
  check_close(x.grad(), doubles({2, 2, 1, 2, 2, 1}, {2, 3}), {0, 0});
}

TEST_CASE("a chain of in-place ops and views matches PyTorch") {
  // Computed with PyTorch 1.13 (float64): y = x * 2; y.narrow(1, 0, 2).mul_(w); y += x;
  // y.clamp_(-3, 4); y /= (w.sum() + 1); y.select(0, 1).relu_(); loss = (y * y).sum().
  Tensor x = doubles({0.5, -1.25, 2.0, 1.5, -0.75, 0.25}, {2, 3}).requires_grad_();
  Tensor w = doubles({1.5, -2.0, 0.5, 3.0}, {2, 2}).requires_grad_();
  Tensor y = x * 2.0;
  y.narrow(1, 0, 2).mul_(w);
  y += x;
  y.clamp_(-3.0, 4.0);
  y /= (w.sum() + 1.0);
  y.select(0, 1).relu_();
  const Tensor loss = (y * y).sum();
  loss.backward();
  check_close(loss, doubles({2.7265625}, {}), {1e-12, 1e-12});
  check_close(x.grad(), doubles({1.0, -1.40625, 0.0, 0.75, 0.0, 0.28125}, {2, 3}), {1e-12, 1e-12});
  check_close(w.grad(), doubles({-1.11328125, -2.53515625, -0.23828125, -1.36328125}, {2, 2}), {1e-12, 1e-12});

  // A gradient penalty through in-place ops (create_graph), PyTorch: [8.172, -29.148, 74.316].
  Tensor x2 = doubles({0.3, -0.7, 1.1}, {3}).requires_grad_();
  Tensor h = x2 * x2;
  h.mul_(x2);
  h.add_(x2, 2.0);
  const Tensor g = autograd::grad({h.sum()}, {x2}, {}, std::nullopt, /*create_graph=*/true)[0];
  (g * g).sum().backward();
  check_close(x2.grad(), doubles({8.172, -29.148, 74.316}, {3}), {1e-12, 1e-12});
}

TEST_CASE("in-place ops refuse leaves that require grad, and saved tensors catch later writes") {
  Tensor x = doubles({1, -2, 3}, {3}).requires_grad_();
  check_error([&] { x.add_(1.0); }, {"[add_]", "a leaf tensor that requires grad", "in-place"});
  check_error([&] { x += x; }, {"[add_]", "leaf"});
  check_error([&] { x.relu_(); }, {"[relu_]", "leaf"});
  check_error([&] { x.narrow(0, 0, 2).mul_(2.0); }, {"[mul_]", "a view of a leaf tensor that requires grad"});
  check_error([&] { x.select(0, 1).copy_(doubles({5}, {})); }, {"[copy_]", "view of a leaf"});
  {
    NoGradGuard no_grad;  // as an optimizer writes its parameters
    x.mul_(2.0);
    x.narrow(0, 0, 1).zero_();
  }
  check_close(x.detach(), doubles({0, -4, 6}, {3}), {0, 0});
  CHECK(x.is_leaf());

  // A tensor saved for backward and then written is caught when backward needs it (as PyTorch).
  Tensor y = x * 1.0;
  Tensor z = (y * y).sum();  // mul saves y
  y.add_(1.0);
  check_error([&] { z.backward(); }, {"modified in place", "version"});
  // relu_ saves its result: writing it again afterwards is caught too.
  Tensor r = x * 1.0;
  r.relu_();
  Tensor s = r.sum();
  r.mul_(2.0);
  check_error([&] { s.backward(); }, {"[relu_]", "modified in place"});
  // A tensor that does not require grad written with one that does joins the graph.
  Tensor w = doubles({0.5, 0.25}, {2}).requires_grad_();
  Tensor buf = zeros({3}, TensorOptions(kFloat64));
  const Tensor tail = buf.narrow(0, 1, 2);  // a view made before the write
  buf.narrow(0, 0, 2).copy_(w * 3.0);
  CHECK(buf.requires_grad());
  CHECK(tail.requires_grad());
  (buf.sum() + tail.sum() * 10.0).backward();
  check_close(w.grad(), doubles({3, 33}, {2}), {0, 0});
}

TEST_CASE("retain_grad keeps the gradient of the newest value; expanded views are never written") {
  // PyTorch 1.13: y = x * 2; y.retain_grad(); y.mul_(3); (y * y).sum().backward()
  // gives y.grad = [12, 24, 36] and x.grad = [72, 144, 216].
  Tensor x = doubles({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);
  (y * y).sum().backward();
  check_close(y.grad(), doubles({12, 24, 36}, {3}), {0, 0});
  check_close(x.grad(), doubles({72, 144, 216}, {3}), {0, 0});

  Tensor wide = (x * 1.0).expand({2, 3});
  check_error([&] { wide.mul_(2.0); }, {"[mul_]", "more than one element", "clone()"});
  NoGradGuard no_grad;
  Tensor plain = zeros({3}).expand({4, 3});
  check_error([&] { plain.fill_(1.0); }, {"[fill_]", "same memory"});
}

TEST_CASE("relu_, clamp_ and masked_fill_ refuse bad input, naming the op") {
  Tensor flags = zeros({3}, TensorOptions(kBool));
  check_error([&] { flags.relu_(); }, {"[relu_]", "bool"});
  Tensor x = doubles({1, 2, 3}, {3});
  check_error([&] { x.clamp_(std::nullopt, std::nullopt); }, {"[clamp_]", "at least one of min and max"});
  Tensor ints = tensor(std::vector<int64_t>{1, 2, 3});
  check_error([&] { ints.clamp_(0.5, 2.0); }, {"[clamp_]", "fractional bound"});
  check_error([&] { x.masked_fill_(doubles({1, 0, 1}, {3}), 0.0); }, {"[masked_fill_]", "bool mask"});
  check_error([&] { x.masked_fill_(zeros({2, 3}, TensorOptions(kBool)), 0.0); }, {"[masked_fill_]"});
}

TEST_CASE("views made before an in-place op see it in their gradients") {
  Tensor x = doubles({1, 2, 3, 4}, {4}).requires_grad_();
  Tensor y = x * 1.0;
  const Tensor head = y.narrow(0, 0, 2);
  Tensor same = y.narrow(0, 0, 2);
  y.mul_(3.0);                   // the base written: head's values and gradient change
  same.mul_(x.narrow(0, 0, 2));  // a sibling view written: head sees it too
  check_close(head, doubles({3, 12}, {2}), {0, 0});
  head.sum().backward();
  // head = 3 x[0:2] * x[0:2], so d/dx = 6 x on the first two, 0 elsewhere.
  check_close(x.grad(), doubles({6, 12, 0, 0}, {4}), {0, 0});
  // backward() straight from a view made before the write also sees it.
  x.set_grad(Tensor());
  Tensor y2 = x * 1.0;
  const Tensor v = y2.narrow(0, 1, 2);
  y2.add_(y2.detach());  // the values double: a constant shift for v's gradient, x * 1 + c
  y2.mul_(2.0);
  v.backward(ones({2}, TensorOptions(kFloat64)));
  check_close(x.grad(), doubles({0, 2, 2, 0}, {4}), {0, 0});
}

TEST_CASE("an in-place op on a float16 tensor with a float32 operand gives each its own dtype's gradient") {
  manual_seed(13);
  Tensor x = randn({2, 3}).to(kFloat32).requires_grad_();
  Tensor w = randn({3}).to(kFloat32).requires_grad_();
  Tensor y = x.to(kFloat16);
  y.mul_(w);  // computed in float16, as PyTorch
  CHECK(y.dtype() == kFloat16);
  y.sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(w.grad().dtype() == kFloat32);
  check_close(x.grad(), w.detach().unsqueeze(0).expand({2, 3}).contiguous(), {1e-3, 1e-3});
  check_close(w.grad(), x.detach().sum({0}), {5e-3, 5e-3});
}
