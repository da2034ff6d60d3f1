// amp with autograd: backward replays the forward's autocast state, gradients arrive in their
// tensor's dtype, custom functions (cast_inputs included), and backward on another thread.
#include <thread>

#include "helpers.h"

using namespace hg;

namespace {
// Every backward mm event's input dtypes.
std::vector<std::vector<Dtype>> backward_mm_inputs(const OpRecorder& rec) {
  std::vector<std::vector<Dtype>> out;
  for (const OpEvent& e : rec.events())
    if (e.name == "mm" && e.backward) out.push_back(e.inputs);
  return out;
}

// y = x @ w, whose backward calls mm on the saved float32 weight: it only works when the
// engine replays the forward's bfloat16 region (the incoming gradient is bfloat16).
struct MatmulFn : autograd::Function<MatmulFn> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w) {
    ctx->save_for_backward({x, w});
    return mm(x, w);
  }
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    TensorList s = ctx->saved();
    return {mm(g[0], s[1].t()), mm(s[0].t(), g[0])};
  }
};

// Declares cast_inputs: runs in float32 with autocast off inside a region.
struct Float32Only : autograd::Function<Float32Only> {
  static constexpr std::optional<Dtype> cast_inputs = kFloat32;
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w, double factor) {
    CHECK_FALSE(amp::is_autocast_enabled(kCPU));
    ctx->save_for_backward({x, w});
    ctx->data["factor"] = factor;
    return mm(x, w) * factor;  // mm stays float32: autocast is off in here
  }
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    TensorList s = ctx->saved();
    const double f = std::any_cast<double>(ctx->data["factor"]);
    return {mm(g[0], s[1].t()) * f, mm(s[0].t(), g[0]) * f};
  }
};
}  // namespace

TEST_CASE("amp: backward outside the region replays it and float32 weights get float32 grads") {
  Tensor x = randn({4, 3}), w = randn({3, 2}).requires_grad_(), v = randn({2, 5}).requires_grad_();
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    loss = mm(relu(mm(x, w)), v).to(kFloat32).sum();
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  OpRecorder rec;
  loss.backward();
  const auto mms = backward_mm_inputs(rec);
  CHECK(mms.size() == 3);  // dv, dh, dw
  for (const auto& in : mms) CHECK(in == std::vector<Dtype>{kBFloat16, kBFloat16});
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(v.grad().dtype() == kFloat32);
  // And the values match a float32 run within bfloat16 tolerance.
  Tensor w32 = w.detach().clone().requires_grad_(), v32 = v.detach().clone().requires_grad_();
  mm(relu(mm(x, w32)), v32).sum().backward();
  hg::test::check_close(w.grad(), w32.grad(), {1e-1, 5e-2});
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
}

TEST_CASE("amp: a custom function's backward runs in its forward's dtype, on any thread") {
  Tensor x = randn({4, 3}), w = randn({3, 2}).requires_grad_();
  auto forward = [&] {
    amp::AutocastGuard g(kCPU, kBFloat16);
    Tensor y = MatmulFn::apply(x, w);
    CHECK(y.dtype() == kBFloat16);
    return y.to(kFloat32).sum();
  };
  {
    Tensor loss = forward();
    OpRecorder rec;
    loss.backward();
    const auto mms = backward_mm_inputs(rec);
    REQUIRE(mms.size() == 2);
    for (const auto& in : mms) CHECK(in == std::vector<Dtype>{kBFloat16, kBFloat16});
    CHECK(w.grad().dtype() == kFloat32);
  }
  // The same, with backward() called on another thread (whose own autocast state is off).
  w.set_grad(Tensor());
  Tensor loss = forward();
  std::vector<std::vector<Dtype>> mms;
  std::string error;
  std::thread t([&] {
    try {
      OpRecorder rec;
      loss.backward();
      mms = backward_mm_inputs(rec);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  t.join();
  CHECK(error.empty());
  REQUIRE(mms.size() == 2);
  for (const auto& in : mms) CHECK(in == std::vector<Dtype>{kBFloat16, kBFloat16});
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("amp: cast_inputs runs a custom function in float32 with autocast off inside a region") {
  Tensor x = randn({2, 3}, kBFloat16).requires_grad_(), w = randn({3, 2}).requires_grad_();
  Tensor y;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    OpRecorder rec;
    y = Float32Only::apply(x, w, 2.0);
    CHECK(amp::is_autocast_enabled(kCPU));
    CHECK(y.dtype() == kFloat32);
    for (const OpEvent& e : rec.events())
      if (e.name == "mm") CHECK(e.inputs == std::vector<Dtype>{kFloat32, kFloat32});
  }
  y.sum().backward();
  CHECK(x.grad().dtype() == kBFloat16);  // back through the recorded cast
  CHECK(w.grad().dtype() == kFloat32);
  // d/dx sum(2 x w) = 2 * 1 w^T
  hg::test::check_close(x.grad().to(kFloat32), mm(ones({2, 2}), w.detach().t()) * 2.0, hg::test::tolerance(kBFloat16));
  // Outside a region cast_inputs does nothing: a bfloat16 input stays bfloat16.
  Tensor xb = randn({2, 3}, kBFloat16), wb = randn({3, 2}, kBFloat16);
  CHECK(Float32Only::apply(xb, wb, 1.0).dtype() == kBFloat16);
}
