// rms_norm and nn::RMSNorm: float64 references (PyTorch 1.13 has no rms_norm; the reference is
// its formula x * rsqrt(mean(x^2) + eps) * weight composed in float64), every dtype, gradients,
// gradcheck, gradgradcheck, bad input.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
Tensor reference(const Tensor& x, int64_t k, const Tensor& w, double eps) {
  const Tensor d = x.to(kFloat64);
  std::vector<int64_t> dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  Tensor y = d * rsqrt(mean(d * d, dims, true) + eps);
  return w.defined() ? y * w.to(kFloat64) : y;
}
}  // namespace

TEST_CASE("rms_norm matches a float64 reference in every float dtype") {
  manual_seed(51);
  const Tensor x64 = randn({3, 5, 8}, kFloat64) * 2.0 + 0.5, w64 = randn({5, 8}, kFloat64);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), w = w64.to(d);
    check_close(rms_norm(x, {8}), reference(x, 1, Tensor(), d == kFloat64 ? 2.220446049250313e-16 : 1.1920929e-07));
    check_close(rms_norm(non_contiguous(x), {5, 8}, w, 1e-3), reference(x, 2, w, 1e-3));
    CHECK(rms_norm(x, {8}).dtype() == d);
    // A float32 weight with 16-bit input (master weights) gives the input's dtype.
    CHECK(rms_norm(x, {5, 8}, w64.to(kFloat32), 1e-5).dtype() == d);
  }
  // Zero rows give zeros (eps keeps rsqrt finite); empty inputs give empty outputs.
  CHECK(rms_norm(zeros({2, 4}), {4}).to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(rms_norm(zeros({0, 4}), {4}).shape() == Shape{0, 4});
}

TEST_CASE("rms_norm gradients match the float64 reference's and finite differences") {
  manual_seed(52);
  Tensor x = randn({4, 6}, kFloat64).requires_grad_(true), w = randn({6}, kFloat64).requires_grad_(true);
  Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true);
  const Tensor gy = randn({4, 6}, kFloat64);
  (rms_norm(x, {6}, w, 1e-6) * gy).sum().backward();
  (reference(xr, 1, wr, 1e-6) * gy).sum().backward();
  check_close(x.grad(), xr.grad());
  check_close(w.grad(), wr.grad());
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  CHECK(gradcheck(
      [](const TensorList& in) {
        return rms_norm(in[0], {3, 2}, in[1], 1e-5);
      },
      {randn({2, 3, 2}, kFloat64), randn({3, 2}, kFloat64)}));
  CHECK(gradcheck([](const TensorList& in) { return rms_norm(in[0], {4}); }, {randn({3, 4}, kFloat64)}));
  CHECK(gradgradcheck([](const TensorList& in) { return rms_norm(in[0], {4}, in[1], 1e-5); },
                      {randn({3, 4}, kFloat64), randn({4}, kFloat64)}));
}

TEST_CASE("nn::RMSNorm: parameters as PyTorch's, forward through rms_norm") {
  nn::RMSNorm norm(Shape{4}, {.eps = 1e-5});
  REQUIRE(norm.named_parameters().size() == 1);
  CHECK(norm.named_parameters()[0].first == "weight");
  CHECK(norm.weight.to_vector<float>() == std::vector<float>(4, 1.0f));
  const Tensor x = randn({3, 4});
  CHECK(test::bitwise_equal(norm(x), rms_norm(x, {4}, norm.weight, 1e-5)));
  nn::RMSNorm plain(Shape{2, 4}, {.elementwise_affine = false});
  CHECK(plain.parameters().empty());
  check_close(plain(zeros({2, 4})), zeros({2, 4}));
  CHECK(fmt::format("{}", norm).find("RMSNorm(") != std::string::npos);
  CHECK(fmt::format("{}", norm).find("eps=1e-05, elementwise_affine=true") != std::string::npos);
}

TEST_CASE("rms_norm: bad input names the op") {
  check_error([] { rms_norm(randn({2, 3}), {4}); }, {"[rms_norm]", "normalized_shape"});
  check_error([] { rms_norm(randn({2, 3}), {}); }, {"[rms_norm]", "at least one dim"});
  check_error([] { rms_norm(randn({2, 3}), {3}, randn({4})); }, {"[rms_norm]", "weight must have shape"});
  check_error([] { rms_norm(arange(int64_t{3}), {3}); }, {"[rms_norm]", "floating-point"});
  check_error([] { rms_norm(randn({2, 3}), {3}, Tensor(), -1.0); }, {"[rms_norm]", "eps"});
  check_error([] { rms_norm(Tensor(), {3}); }, {"[rms_norm]", "undefined"});
}
