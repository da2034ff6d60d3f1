// Higher-order gradients (create_graph) and hooks.
#include <halfgrad.h>

int main() {
  // create_graph records the backward formulas: the gradient has a grad_fn and can be
  // differentiated again (a gradient penalty, a Hessian-vector product).
  hg::Tensor x = hg::tensor(std::vector<double>{1, 2, 3}).requires_grad_();
  hg::Tensor y = (x * x * x).sum();
  hg::Tensor dy = hg::autograd::grad({y}, {x}, /*grad_outputs=*/{}, /*retain_graph=*/std::nullopt,
                                     /*create_graph=*/true)[0];  // 3x^2, with a history
  hg::Tensor d2y = hg::autograd::grad({dy.sum()}, {x})[0];
  HG_CHECK(d2y.to_vector<double>() == std::vector<double>({6, 12, 18}), "guide", "d2(x^3)/dx2 = 6x");
  // gradgradcheck compares second derivatives with finite differences of the first (float64).
  HG_CHECK(
      hg::autograd::gradgradcheck([](const hg::TensorList& in) { return hg::tanh(in[0]) * in[0]; }, {hg::randn({4})}),
      "guide", "gradgradcheck");

  // Tensor hooks see (and may replace) a gradient; post-accumulate-grad hooks run once per
  // backward after a leaf's .grad is final. remove() unregisters either.
  hg::Tensor w = hg::tensor(std::vector<float>{1, 2}).requires_grad_();
  hg::RemovableHandle clip = w.register_hook([](const hg::Tensor& g) { return hg::clamp(g, -1.0, 1.0); });
  int updates = 0;
  w.register_post_accumulate_grad_hook([&](const hg::Tensor& t) { updates += t.grad().defined(); });
  (w * 5.0).sum().backward();
  HG_CHECK(w.grad().to_vector<float>() == std::vector<float>({1, 1}) && updates == 1, "guide", "hooks ran");
  clip.remove();

  // Module hooks run when a module is called as module(x) (Sequential calls its layers so).
  auto fc = std::make_shared<hg::nn::Linear>(2, 3);
  std::vector<hg::Shape> shapes;
  hg::RemovableHandle spy = fc->register_forward_hook(
      [&](hg::nn::Module&, const hg::Tensor&, const hg::Tensor& out) -> std::optional<hg::Tensor> {
        shapes.push_back(out.shape());
        return std::nullopt;  // or a replacement output
      });
  (*fc)(hg::randn({4, 2}));
  spy.remove();
  (*fc)(hg::randn({4, 2}));
  HG_CHECK(shapes.size() == 1 && shapes[0] == hg::Shape({4, 3}), "guide", "forward hook");
}
