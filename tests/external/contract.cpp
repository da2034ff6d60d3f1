// Built outside the tree with `pkg-config --cflags --libs halfgrad`: the public contract.
#include <halfgrad.h>

#include <cstdio>

int main() {
  hg::manual_seed(0);
  hg::Tensor x = hg::randn({5, 4});
  hg::Tensor w = hg::randn({4, 3}).requires_grad_();
  auto loss = hg::mm(x, w).relu().mean();
  loss.backward();
  const bool ok = w.grad().dtype() == hg::kFloat32 && w.grad().shape() == hg::Shape{4, 3};
  std::printf("loss %.4f, grad ok: %s\n", loss.item<float>(), ok ? "yes" : "no");
  return ok ? 0 : 1;
}
