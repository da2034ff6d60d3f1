// optim::clip_grad_value_: clamps each gradient in place, as torch.nn.utils.clip_grad_value_.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("clip_grad_value_ clamps every gradient to [-v, v] in place and skips missing ones") {
  Tensor a = zeros({4}).requires_grad_(true), b = zeros({2}, kFloat64).requires_grad_(true),
         c = zeros({3}).requires_grad_(true);
  (a * tensor(std::vector<float>{-3, -0.5, 0.25, 7})).sum().backward();
  (b * tensor(std::vector<double>{NAN, 2})).sum().backward();
  const Tensor before = a.grad();
  optim::clip_grad_value_({a, b, c}, 1.0);
  // torch.nn.utils.clip_grad_value_ gives [-1, -0.5, 0.25, 1] and [nan, 1] here.
  CHECK(a.grad().to_vector<float>() == std::vector<float>{-1, -0.5, 0.25, 1});
  CHECK(a.grad().is_same(before));  // in place: the same tensor
  const auto bv = b.grad().to_vector<double>();
  CHECK(std::isnan(bv[0]));
  CHECK(bv[1] == 1.0);
  CHECK_FALSE(c.grad().defined());
  check_error([&] { optim::clip_grad_value_({a}, NAN); }, {"[clip_grad_value_]", "NaN"});
}
