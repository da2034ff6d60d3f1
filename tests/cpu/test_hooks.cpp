// Hooks: Tensor::register_hook (leaves and non-leaves), register_post_accumulate_grad_hook,
// Module forward and forward-pre hooks, and their handles.
#include <vector>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

TEST_CASE("register_hook on a leaf sees the summed gradient once, before accumulation, and may replace it") {
  Tensor x = tensor(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  std::vector<std::vector<double>> seen;
  RemovableHandle h = x.register_hook([&](const Tensor& g) { seen.push_back(g.to_vector<double>()); });
  RemovableHandle scale = x.register_hook([](const Tensor& g) { return g * 10.0; });
  // x is used twice: its two contributions (2 and 3x^2) reach the hooks as one gradient.
  (x * 2.0 + x * x * x).sum().backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{5, 14, 29});
  check_close(x.grad(), tensor(std::vector<double>{50, 140, 290}, {3}), {1e-12, 1e-12});

  scale.remove();
  scale.remove();  // idempotent
  x.set_grad(Tensor());
  (x * 2.0).sum().backward();
  CHECK(seen.size() == 2);
  check_close(x.grad(), tensor(std::vector<double>{2, 2, 2}, {3}), {0, 0});

  // Destroying a handle does not remove the hook (as PyTorch).
  {
    RemovableHandle dropped = x.register_hook([](const Tensor& g) { return g * 0.0; });
  }
  x.set_grad(Tensor());
  (x * 2.0).sum().backward();
  check_close(x.grad(), zeros({3}, kFloat64), {0, 0});
  h.remove();
}

TEST_CASE("register_hook on a non-leaf runs when its gradient arrives, and changes what flows upstream") {
  Tensor x = tensor(std::vector<double>{1, -2}, {2}).requires_grad_();
  Tensor y = x * 3.0;
  int calls = 0;
  RemovableHandle h = y.register_hook([&](const Tensor& g) {
    ++calls;
    return g + 1.0;
  });
  y.retain_grad();
  Tensor loss = (y * y).sum();  // dloss/dy = 2y = {6, -12}
  y = Tensor();                 // the hook lives on y's grad_fn, not on the handle
  loss.backward({}, true);
  CHECK(calls == 1);
  check_close(x.grad(), tensor(std::vector<double>{21, -33}, {2}), {1e-12, 1e-12});  // (2y + 1) * 3
  h.remove();
  x.set_grad(Tensor());
  loss.backward();
  CHECK(calls == 1);
  check_close(x.grad(), tensor(std::vector<double>{18, -36}, {2}), {1e-12, 1e-12});

  // grad() returns the hooked gradient, as PyTorch does.
  Tensor a = tensor(std::vector<double>{2}, {1}).requires_grad_();
  Tensor b = a * a;
  b.register_hook([](const Tensor& g) { return g * 0.5; });
  CHECK(autograd::grad({b.sum()}, {b})[0].item<double>() == 0.5);
  CHECK(autograd::grad({(a * a).sum()}, {a})[0].item<double>() == 4.0);
}

TEST_CASE("hooks refuse clearly") {
  check_error([] { zeros({2}).register_hook([](const Tensor&) {}); }, {"[register_hook]", "does not require grad"});
  Tensor x = zeros({2}).requires_grad_();
  check_error([&] { (x * 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}); },
              {"[register_post_accumulate_grad_hook]", "leaf"});
  x.register_hook([](const Tensor&) { return zeros({3}); });
  check_error([&] { (x * 2.0).sum().backward(); }, {"[hook]", "shape [3]"});
}

TEST_CASE("hooks that change the gradient's type or shape are refused, naming the hook") {
  // A leaf: the second of two hooks returns an int32 gradient (as PyTorch, "hook has changed the
  // type of value"); nothing reaches .grad.
  Tensor x = ones({3}).requires_grad_();
  int looked = 0;
  x.register_hook([&](const Tensor&) { ++looked; });
  RemovableHandle to_int = x.register_hook([](const Tensor& g) { return (g * 2.5).to(kInt32); });
  check_error([&] { (x * 2.0).sum().backward(); },
              {"[hook]", "gradient hook 2 of 2 on a leaf", "type", "was float32, got int32"});
  CHECK(looked == 1);
  CHECK_FALSE(x.grad().defined());
  to_int.remove();
  RemovableHandle to_double = x.register_hook([](const Tensor& g) { return g.to(kFloat64); });
  check_error([&] { (x * 2.0).sum().backward(); }, {"[hook]", "on a leaf", "was float32, got float64"});
  to_double.remove();
  RemovableHandle wider = x.register_hook([](const Tensor& g) { return g.unsqueeze(0); });
  check_error([&] { (x * 2.0).sum().backward(); }, {"[hook]", "on a leaf", "returned shape [1, 3]"});
  wider.remove();
  (x * 2.0).sum().backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});

  // A non-leaf: the gradient flowing on would change type under the next formula.
  Tensor y = x * 3.0;
  y.register_hook([](const Tensor& g) { return g.to(kFloat16); });
  check_error([&] { y.sum().backward(); }, {"[hook]", "gradient hook 1 of 1 on an output of mul", "got float16"});

  // A post-accumulate-grad hook may clear .grad (an optimizer step in backward does) but not
  // leave one of another type behind.
  Tensor w = ones({2}).requires_grad_();
  RemovableHandle recast =
      w.register_post_accumulate_grad_hook([](const Tensor& t) { t.set_grad(t.grad().to(kInt32)); });
  // (.grad's setter refuses it first, as PyTorch's does.)
  check_error([&] { (w * 2.0).sum().backward(); }, {"[set_grad]", "dtype int32", "float32"});
  recast.remove();
  w.set_grad(Tensor());
  w.register_post_accumulate_grad_hook([](const Tensor& t) { t.set_grad(Tensor()); });
  (w * 2.0).sum().backward();
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("post-accumulate-grad hooks run once per leaf per backward, after .grad is final") {
  Tensor w = tensor(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor unused = zeros({2}, kFloat64).requires_grad_();
  std::vector<std::vector<double>> at_hook;
  RemovableHandle h = w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    CHECK(t.is_same(w));
    at_hook.push_back(t.grad().to_vector<double>());
  });
  int unused_calls = 0;
  unused.register_post_accumulate_grad_hook([&](const Tensor&) { ++unused_calls; });
  // w reaches the loss along three paths; the hook sees the sum of all three, once.
  Tensor y = w * w;
  (y.sum() + (w * 3.0).sum() + (y * w).sum()).backward();
  REQUIRE(at_hook.size() == 1);
  CHECK(at_hook[0] == std::vector<double>{1 * 2 + 3 + 3 * 1, 2 * 2 + 3 + 3 * 4});
  // A second backward accumulates, and the hook sees the accumulated value.
  (w * 3.0).sum().backward();
  REQUIRE(at_hook.size() == 2);
  CHECK(at_hook[1] == std::vector<double>{11, 22});
  CHECK(unused_calls == 0);
  // grad() does not accumulate, so it does not run the hook.
  (void)autograd::grad({(w * w).sum()}, {w});
  CHECK(at_hook.size() == 2);
  h.remove();
  (w * 3.0).sum().backward();
  CHECK(at_hook.size() == 2);
}

TEST_CASE("module forward hooks and forward pre-hooks") {
  manual_seed(1);
  auto fc = std::make_shared<nn::Linear>(3, 2);
  auto relu = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential net{fc, relu};
  const Tensor x = randn({4, 3});
  const Tensor plain = net(x);

  std::vector<std::string> order;
  RemovableHandle pre = fc->register_forward_pre_hook([&](nn::Module& m, const Tensor& in) -> std::optional<Tensor> {
    order.push_back("pre " + m.type_name());
    return in * 2.0;  // replaces the input
  });
  RemovableHandle post =
      fc->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) -> std::optional<Tensor> {
        order.push_back("post");
        check_close(in, x * 2.0, {0, 0});  // the hook sees the replaced input
        return std::nullopt;               // keeps the output
      });
  RemovableHandle zero = relu->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return out * 0.0; });
  const Tensor hooked = net(x);  // Sequential calls its layers with their hooks
  CHECK(order == std::vector<std::string>{"pre Linear", "post"});
  check_close(hooked, zeros({4, 2}), {0, 0});
  CHECK(fc->forward(x).shape() == Shape{4, 2});  // forward() itself skips the hooks
  CHECK(order.size() == 2);

  zero.remove();
  check_close(net(x), relu->forward(fc->forward(x * 2.0)), {1e-6, 1e-6});
  pre.remove();
  post.remove();
  post.remove();
  check_close(net(x), plain, {0, 0});
  CHECK(order.size() == 4);  // the call after zero.remove() ran pre and post; the last call ran no hook

  // A handle may outlive its module.
  RemovableHandle orphan;
  {
    auto m = std::make_shared<nn::Linear>(1, 1);
    orphan = m->register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) { return std::nullopt; });
  }
  orphan.remove();
}

// A float32 matmul declared with cast_inputs (custom_fwd/custom_bwd in PyTorch's terms).
struct HookTestMm32 : hg::autograd::Function<HookTestMm32> {
  static constexpr std::optional<Dtype> cast_inputs = kFloat32;
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->save_for_backward({a, b});
    return mm(a, b);
  }
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    const TensorList s = ctx->saved();
    return {mm(g[0], s[1].t()), mm(s[0].t(), g[0])};
  }
};

TEST_CASE("custom_bwd: a cast_inputs Function's backward runs with autocast off, in the cast dtype") {
  manual_seed(7);
  Tensor a = randn({4, 3}).requires_grad_();
  Tensor b = randn({3, 5}).requires_grad_();
  OpRecorder rec;
  {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    Tensor y = HookTestMm32::apply(mm(a, b.t().contiguous().t()), b.t().contiguous());  // the first mm runs in bf16
    CHECK(y.dtype() == kFloat32);
    y.sum().backward();
  }
  size_t forward_mm = 0, backward_mm = 0;
  for (const OpEvent& e : rec.events()) {
    if (e.name != "mm") continue;
    if (!e.backward) {
      ++forward_mm;
      continue;
    }
    ++backward_mm;
  }
  CHECK(forward_mm == 2);
  CHECK(backward_mm == 4);  // two in Mm32's backward, two for the bf16 mm
  // Mm32's backward (the first two backward mm events) ran in float32: autocast was off.
  std::vector<Dtype> backward_dtypes;
  for (const OpEvent& e : rec.events())
    if (e.name == "mm" && e.backward) backward_dtypes.insert(backward_dtypes.end(), e.inputs.begin(), e.inputs.end());
  REQUIRE(backward_dtypes.size() == 8);
  for (size_t i = 0; i < 4; ++i) CHECK(backward_dtypes[i] == kFloat32);
  for (size_t i = 4; i < 8; ++i) CHECK(backward_dtypes[i] == kBFloat16);  // the bf16 mm replays its region
  CHECK(a.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
}
