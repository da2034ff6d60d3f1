// amp on the convolution, pooling and normalisation ops: conv2d runs in the lower dtype (its
// backward too), pooling and the cpu norms pass through, weights keep float32 gradients.
#include "helpers.h"

using namespace hg;

TEST_CASE("amp: conv2d runs in bfloat16 in a region, forward and backward, with float32 weight grads") {
  Tensor x = randn({2, 3, 8, 8}), w = (randn({4, 3, 3, 3}) * 0.2).detach().requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    OpRecorder rec;
    Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
    CHECK(y.dtype() == kBFloat16);
    Tensor pooled = max_pool2d(relu(y), {2, 2});
    CHECK(pooled.dtype() == kBFloat16);  // pass-through
    CHECK(avg_pool2d(y, {2, 2}).dtype() == kBFloat16);
    for (const OpEvent& e : rec.events())
      if (e.name == "conv2d") CHECK(e.inputs == std::vector<Dtype>{kBFloat16, kBFloat16, kBFloat16});
    loss = pooled.to(kFloat32).sum();
  }
  OpRecorder rec;
  loss.backward();
  size_t seen = 0;
  for (const OpEvent& e : rec.events()) {
    if (e.name != "conv2d_backward") continue;
    ++seen;
    CHECK(e.backward);
    CHECK(e.inputs == std::vector<Dtype>{kBFloat16, kBFloat16, kBFloat16});
  }
  CHECK(seen == 1);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
}

TEST_CASE("amp: layer_norm and batch_norm pass through on the cpu") {
  Tensor x = randn({4, 6});
  Tensor gamma = ones({6}).requires_grad_(), beta = zeros({6}).requires_grad_();
  amp::AutocastGuard g(kCPU, kBFloat16);
  CHECK(layer_norm(x, {6}, gamma, beta).dtype() == kFloat32);
  Tensor xb = randn({4, 3, 2, 2});
  CHECK(batch_norm(xb, Tensor(), Tensor(), Tensor(), Tensor(), true).dtype() == kFloat32);
  // A bfloat16 activation (a conv or linear output) stays bfloat16 through layer_norm.
  Tensor h = linear(x, randn({6, 6}));
  REQUIRE(h.dtype() == kBFloat16);
  Tensor gamma16 = gamma.detach().to(kBFloat16), beta16 = beta.detach().to(kBFloat16);
  OpRecorder rec;
  Tensor n = layer_norm(h, {6}, gamma16, beta16);
  CHECK(n.dtype() == kBFloat16);
  CHECK(rec.count("to") == 0);
}
