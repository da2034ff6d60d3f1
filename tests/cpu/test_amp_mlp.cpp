// amp end to end: a small MLP trained 200 steps in float32 and under bfloat16 autocast (with a
// GradScaler, the full loop) reaches the same loss within 5%.
#include <cmath>

#include "helpers.h"

using namespace hg;

namespace {
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(int64_t in, int64_t hidden, int64_t out) {
    w1 = (randn({hidden, in}) * (1.0 / std::sqrt(static_cast<double>(in)))).detach().requires_grad_();
    b1 = zeros({hidden}).requires_grad_();
    w2 = (randn({out, hidden}) * (1.0 / std::sqrt(static_cast<double>(hidden)))).detach().requires_grad_();
    b2 = zeros({out}).requires_grad_();
  }
  TensorList params() const { return {w1, b1, w2, b2}; }
  Tensor operator()(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

Tensor mse(const Tensor& pred, const Tensor& target) {
  Tensor d = pred.to(kFloat32) - target;
  return mean(d * d);
}

struct Data {
  Tensor x, y;
};
// A fixed random teacher network plus noise: the loss floor is the noise variance (0.01).
Data synthetic() {
  manual_seed(42);
  Data d;
  d.x = randn({256, 16});
  Mlp teacher(16, 8, 1);
  NoGradGuard ng;
  d.y = teacher(d.x) + randn({256, 1}) * 0.1;
  return d;
}

double train(bool use_amp) {
  const Data data = synthetic();
  manual_seed(7);
  Mlp model(16, 32, 1);
  optim::SGD opt(model.params(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler(kCPU, {.init_scale = 1024.0, .enabled = use_amp});
  double last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCPU, kBFloat16, use_amp);
      Tensor pred = model(data.x);
      CHECK(pred.dtype() == (use_amp ? kBFloat16 : kFloat32));
      loss = mse(pred, data.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    last = loss.item<double>();
    for (const Tensor& p : model.params()) REQUIRE(p.dtype() == kFloat32);
  }
  return last;
}
}  // namespace

TEST_CASE("amp: an MLP trained 200 steps under bfloat16 autocast matches float32 within 5%") {
  const double fp32 = train(false);
  const double bf16 = train(true);
  MESSAGE("final loss: float32 " << fp32 << ", bfloat16 autocast " << bf16);
  CHECK(std::isfinite(bf16));
  CHECK(fp32 < 0.05);  // it learned: the targets' variance is far above this
  CHECK(std::abs(bf16 - fp32) <= 0.05 * fp32);
}
