// The public contract other issues rely on, exactly as written there.
#include "helpers.h"

TEST_CASE("the foundation contract compiles and runs") {
  hg::manual_seed(0);
  hg::Tensor x = hg::randn({5, 4});
  CHECK(x.dtype() == hg::kFloat32);
  CHECK(x.device() == hg::Device(hg::kCPU));
  hg::Tensor h = hg::zeros({2, 3}, hg::kFloat16);
  CHECK(h.dtype() == hg::kFloat16);
  hg::Tensor b = hg::ones({2, 3}, hg::TensorOptions().dtype(hg::kBFloat16).device(hg::kCPU));
  CHECK(b.dtype() == hg::kBFloat16);
  hg::Tensor t = hg::tensor(std::vector<float>{1, 2, 3, 4}).reshape({2, 2});
  CHECK(t.shape() == hg::Shape{2, 2});
  hg::Tensor w = hg::randn({4, 3}).requires_grad_();
  auto loss = hg::mm(x, w).relu().mean();
  loss.backward();
  float v = loss.item<float>();
  CHECK(v >= 0.0f);
  std::vector<float> g = w.grad().to_vector<float>();
  CHECK(g.size() == 12);
  bool same = (w.grad().dtype() == hg::kFloat32) && (w.grad().shape() == hg::Shape{4, 3});
  CHECK(same);
  {
    hg::NoGradGuard ng;
    auto y = hg::mm(x, w);
    CHECK_FALSE(y.requires_grad());
  }
  hg::Tensor img = hg::randn({2, 3, 8, 8}), weight = hg::randn({4, 3, 3, 3}), bias = hg::zeros({4});
  auto c = hg::conv2d(img, weight, bias, /*stride=*/{1, 1}, /*padding=*/{1, 1});
  CHECK(c.shape() == hg::Shape{2, 4, 8, 8});
  CHECK(hg::Device(hg::kCUDA, 0).is_cuda());
}
