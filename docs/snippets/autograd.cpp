// Autograd: requires_grad, backward, .grad(), no-grad regions and a custom function.
#include <halfgrad.h>

// y = x^3 with a hand-written backward (torch.autograd.Function's static forward/backward).
struct Cube : hg::autograd::Function<Cube> {
  static hg::Tensor forward(hg::autograd::AutogradContext* ctx, const hg::Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static hg::TensorList backward(hg::autograd::AutogradContext* ctx, const hg::TensorList& grad) {
    const hg::Tensor x = ctx->saved()[0];
    return {grad[0] * x * x * 3.0};
  }
};

int main() {
  hg::Tensor x = hg::tensor(std::vector<float>{1, 2, 3}).requires_grad_();
  hg::Tensor y = (x * x).sum();  // y = sum(x^2)
  y.backward();
  HG_CHECK(x.grad().to_vector<float>() == std::vector<float>({2, 4, 6}), "guide", "dy/dx = 2x");

  x.set_grad(hg::Tensor());  // gradients accumulate, as in PyTorch: clear before the next backward
  Cube::apply(x).sum().backward();
  HG_CHECK(x.grad().to_vector<float>() == std::vector<float>({3, 12, 27}), "guide", "d(x^3)/dx = 3x^2");

  {
    hg::NoGradGuard no_grad;  // torch.no_grad()
    hg::Tensor z = x * 2.0;
    HG_CHECK(!z.requires_grad(), "guide", "nothing is recorded under NoGradGuard");
  }
  HG_CHECK(!x.detach().requires_grad(), "guide", "detach() drops the history");

  // gradcheck compares the analytic gradient with finite differences (in float64).
  HG_CHECK(hg::autograd::gradcheck([](const hg::TensorList& in) { return Cube::apply(in[0]); }, {hg::randn({4})}),
           "guide", "gradcheck");
}
