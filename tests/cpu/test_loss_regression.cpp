// l1_loss, smooth_l1_loss, huber_loss and kl_div: values against PyTorch's (computed with
// Debian's torch 1.13 in float64 and pasted here), every float dtype, gradchecks and errors.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {
const Shape kShape = {2, 3};
// x, y as in the PyTorch script:
//   x = [[0.5, -1.5, 2.0], [0.1, 3.0, -0.2]], y = [[0.0, 1.0, 1.9], [-0.4, 0.0, 0.3]]
Tensor x64() { return tensor(std::vector<double>{0.5, -1.5, 2.0, 0.1, 3.0, -0.2}, kShape); }
Tensor y64() { return tensor(std::vector<double>{0.0, 1.0, 1.9, -0.4, 0.0, 0.3}, kShape); }
// torch.log_softmax(x, 1), the target t = [[0.2, 0, 0.8], [0.5, 0.25, 0.25]] and torch.log_softmax(y, 1)
Tensor lp64() {
  return tensor(std::vector<double>{-1.7258020492315993, -3.7258020492315995, -0.22580204923159933, -2.9914713883680535,
                                    -0.09147138836805359, -3.2914713883680538},
                kShape);
}
Tensor t64() { return tensor(std::vector<double>{0.2, 0.0, 0.8, 0.5, 0.25, 0.25}, kShape); }
Tensor logt64() {
  return tensor(std::vector<double>{-2.3422072900359523, -1.3422072900359523, -0.4422072900359523, -1.5053160526833755,
                                    -1.1053160526833754, -0.8053160526833755},
                kShape);
}
Tensor s(double v) { return scalar_tensor(v, kFloat64); }
Tolerance tol(Dtype d) {
  if (d == kFloat64) return {1e-12, 1e-12};
  if (d == kFloat32) return {1e-5, 1e-5};
  return {5e-2, 5e-2};
}
constexpr Dtype kDtypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16};
}  // namespace

TEST_CASE("l1/smooth_l1/huber losses match PyTorch") {
  for (Dtype d : kDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64().to(d), y = y64().to(d);
    // F.l1_loss(x, y, reduction=...)
    check_close(l1_loss(x, y, Reduction::None), tensor(std::vector<double>{0.5, 2.5, 0.1, 0.5, 3.0, 0.5}, kShape),
                tol(d));
    check_close(l1_loss(x, y), s(1.1833333333333333), tol(d));
    check_close(l1_loss(x, y, Reduction::Sum), s(7.1), tol(d));
    // F.smooth_l1_loss(x, y, reduction=..., beta=0.5)
    check_close(smooth_l1_loss(x, y, Reduction::None, 0.5),
                tensor(std::vector<double>{0.25, 2.25, 0.01, 0.25, 2.75, 0.25}, kShape), tol(d));
    check_close(smooth_l1_loss(x, y, Reduction::Mean, 0.5), s(0.96), tol(d));
    check_close(smooth_l1_loss(x, y, Reduction::Sum, 0.5), s(5.76), tol(d));
    // F.huber_loss(x, y, reduction=..., delta=0.7)
    check_close(huber_loss(x, y, Reduction::None, 0.7),
                tensor(std::vector<double>{0.125, 1.505, 0.005, 0.125, 1.855, 0.125}, kShape), tol(d));
    check_close(huber_loss(x, y, Reduction::Mean, 0.7), s(0.6233333333333332), tol(d));
    check_close(huber_loss(x, y, Reduction::Sum, 0.7), s(3.7399999999999993), tol(d));
    CHECK(l1_loss(x, y).dtype() == d);
    CHECK(huber_loss(x, y, Reduction::None).dtype() == d);
    check_close(l1_loss(non_contiguous(x), non_contiguous(y), Reduction::Sum), s(7.1), tol(d));
  }
  // beta = 0 is the l1 loss (PyTorch's rule); smooth_l1 with beta = 1 is huber with delta = 1.
  const Tensor x = x64(), y = y64();
  check_close(smooth_l1_loss(x, y, Reduction::None, 0.0), l1_loss(x, y, Reduction::None));
  check_close(smooth_l1_loss(x, y, Reduction::None), huber_loss(x, y, Reduction::None));
  // The target broadcasts (PyTorch warns, computes the same).
  check_close(l1_loss(x, y.select(0, 0), Reduction::Sum), (x - y.select(0, 0)).abs().sum());
  CHECK(std::isnan(l1_loss(zeros({0}), zeros({0})).item<float>()));  // mean of nothing, as PyTorch
}

TEST_CASE("kl_div matches PyTorch, with and without log_target, in every reduction") {
  for (Dtype d : kDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor lp = lp64().to(d), t = t64().to(d), lt = logt64().to(d);
    // F.kl_div(lp, t, reduction=...)
    check_close(kl_div(lp, t, Reduction::None),
                tensor(std::vector<double>{0.023272827359499815, 0.0, 0.002126798333911689, 1.149162103904054,
                                           -0.32370574318795925, 0.4762942568120408},
                       kShape),
                tol(d));
    check_close(kl_div(lp, t), s(0.2211917072035912), tol(d));
    check_close(kl_div(lp, t, Reduction::Sum), s(1.3271502432215472), tol(d));
    check_close(kl_div(lp, t, Reduction::BatchMean), s(0.6635751216107736), tol(d));
    // F.kl_div(lp, log_softmax(y, 1), reduction=..., log_target=True)
    check_close(kl_div(lp, lt, Reduction::None, true),
                tensor(std::vector<double>{-0.05924594362534872, 0.6227578379803778, -0.13906555974481358,
                                           0.3298479200465136, -0.3356902731448929, 1.1111787875949324},
                       kShape),
                tol(d));
    check_close(kl_div(lp, lt, Reduction::Mean, true), s(0.2549637948511281), tol(d));
    check_close(kl_div(lp, lt, Reduction::Sum, true), s(1.5297827691067685), tol(d));
    check_close(kl_div(lp, lt, Reduction::BatchMean, true), s(0.7648913845533842), tol(d));
    CHECK(kl_div(lp, t).dtype() == d);
  }
}

TEST_CASE("regression and kl_div gradients match finite differences") {
  manual_seed(41);
  using autograd::gradcheck;
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    CHECK(gradcheck([r](const TensorList& x) { return l1_loss(x[0], x[1], r); }, {randn({3, 4}), randn({3, 4})}));
    CHECK(gradcheck([r](const TensorList& x) { return smooth_l1_loss(x[0], x[1], r, 0.8); },
                    {randn({3, 4}), randn({3, 4})}));
    CHECK(
        gradcheck([r](const TensorList& x) { return huber_loss(x[0], x[1], r, 0.6); }, {randn({3, 4}), randn({3, 4})}));
  }
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum, Reduction::BatchMean}) {
    CHECK(gradcheck([r](const TensorList& x) { return kl_div(x[0], x[1], r); }, {randn({3, 4}), rand({3, 4}) + 0.1}));
    CHECK(gradcheck([r](const TensorList& x) { return kl_div(x[0], x[1], r, true); }, {randn({3, 4}), randn({3, 4})}));
  }
  CHECK(gradcheck([](const TensorList& x) { return smooth_l1_loss(x[0], x[1], Reduction::Mean, 0.0); },
                  {randn({3, 4}), randn({4})}));
  CHECK(gradcheck([](const TensorList& x) { return huber_loss(x[0], x[1]); }, {randn({3, 4}), randn({4})}));
}

TEST_CASE("regression and kl_div loss errors") {
  check_error([] { l1_loss(zeros({2, 3}), zeros({4})); }, {"[l1_loss]", "[2, 3]", "[4]"});
  check_error([] { l1_loss(zeros({2}, kInt64), zeros({2})); }, {"[l1_loss]", "int64"});
  check_error([] { l1_loss(zeros({2}), zeros({2}), Reduction::BatchMean); }, {"[l1_loss]", "BatchMean", "kl_div"});
  check_error([] { smooth_l1_loss(zeros({2}), zeros({2}), Reduction::Mean, -1.0); }, {"[smooth_l1_loss]", "beta"});
  check_error([] { huber_loss(zeros({2}), zeros({2}), Reduction::Mean, 0.0); }, {"[huber_loss]", "delta"});
  check_error([] { huber_loss(zeros({2}), zeros({3})); }, {"[huber_loss]", "[2]", "[3]"});
  check_error([] { kl_div(zeros({2}), zeros({2}, kInt32)); }, {"[kl_div]", "int32"});
  check_error([] { kl_div(zeros({2, 3}), zeros({3, 2})); }, {"[kl_div]", "[2, 3]", "[3, 2]"});
  check_error([] { mse_loss(zeros({2}), zeros({2}), Reduction::BatchMean); }, {"[mse_loss]", "BatchMean"});
  check_error(
      [] {
        cross_entropy(zeros({2, 3}), zeros({2}, kInt64), Reduction::BatchMean);
      },
      {"[cross_entropy]", "BatchMean"});
}
