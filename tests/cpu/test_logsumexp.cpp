// logsumexp: values and gradients against PyTorch, float64 references per dtype, non-adjacent
// dims, special values, gradcheck, gradgradcheck, bad input.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
Tensor torch_input() {
  return tensor(std::vector<double>{0.5, -1.0, 2.0, 3.0, 0.25, -0.75, -2.0, 1.5, 0.0, 1.0, -0.5, 4.0}, {2, 2, 3});
}
// log(sum(exp)) of a float64 copy over dims (a float64 composition of public ops, shifted by the max).
Tensor reference(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor d = x.to(kFloat64);
  Tensor m = d;
  for (int64_t k : dims) m = max(m, k, true).first;
  Tensor r = log(sum(exp(d - m), dims, true)) + m;
  return keepdim ? r : sum(r, dims, false);
}
}  // namespace

TEST_CASE("logsumexp: values and gradients match PyTorch") {
  struct Case {
    std::vector<int64_t> dims;
    bool keepdim;
    Shape shape;
    std::vector<double> y, grad;
  };
  // torch.logsumexp(x, dims, keepdim) on torch_input() in float64; grad = autograd.grad((y * w).sum(), x) with
  // w = arange(1, y.numel() + 1).reshape(y.shape). The empty dims case is torch.logsumexp(x, (0, 1, 2)).
  const std::vector<Case> cases = {
      {{1},
       false,
       {2, 3},
       {3.0788897342925496, 0.501929081345373, 2.0619675890031988, 1.048587351573742, 1.6269280110429727,
        4.0181499279178094},
       {0.07585818002124355, 0.4454002776506177, 2.8197400494779767, 0.9241418199787564, 1.5545997223493822,
        0.18025995052202284, 0.18970349271026712, 4.403985389889412, 0.10791725977254937, 3.810296507289733,
        0.5960146101105877, 5.892082740227452}},
      {{0, 2},
       true,
       {1, 2, 1},
       {2.7095611366890533, 4.379083450427297},
       {0.10974880267110512, 0.02448826791610211, 0.49186000941378083, 0.5036184859565767, 0.03219525267136424,
        0.011843971561114861, 0.0090087303162322, 0.2983281759960026, 0.06656601368677702, 0.06815735044012736,
        0.015207960518998271, 1.3689769788518191}},
      {{},
       false,
       {},
       {4.551638309721702},
       {0.017393854762321595, 0.003881093598715346, 0.07795384877934439, 0.21190053059533617, 0.013546347709526342,
        0.004983422825294599, 0.0014277745442294635, 0.04728139932727461, 0.010549906203936647, 0.028677618326108333,
        0.006398841569780099, 0.5760053617581322}},
      {{-1},
       false,
       {2, 2},
       {2.241311296657157, 3.083831466235782, 1.7258020492315995, 4.059113895272803},
       {0.1752903921400367, 0.03911257327068745, 0.7855970345892758, 1.8391724487279602, 0.11757436103748155,
        0.04325319023455811, 0.07228130486054518, 2.393628078620977, 0.5340906165184771, 0.18771704416594404,
        0.041885334127336964, 3.770397621706719}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.dims.size());
    for (Dtype d : {kFloat64, kFloat32}) {
      Tensor x = torch_input().to(d).requires_grad_(true);
      Tensor y = logsumexp(x, c.dims, c.keepdim);
      REQUIRE(y.shape() == c.shape);
      CHECK(y.dtype() == d);
      Tensor w = arange(1.0, static_cast<double>(y.numel()) + 1, 1.0, TensorOptions(d)).reshape(y.shape());
      (y * w).sum().backward();
      check_close(y, tensor(c.y, c.shape));
      check_close(x.grad(), tensor(c.grad, {2, 2, 3}));
    }
  }
}

TEST_CASE("logsumexp matches a float64 reference in every float dtype, strided and non-adjacent dims too") {
  manual_seed(31);
  const Tensor x64 = randn({4, 5, 6, 3}, kFloat64) * 4.0;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d);
    for (const auto& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {3}, {1, 2}, {0, 2}, {0, 3}, {2, 0}}) {
      CAPTURE(dims.size());
      check_close(logsumexp(x, dims), reference(x, dims, false));
      check_close(logsumexp(non_contiguous(x), dims, true), reference(x, dims, true));
    }
  }
  // A 0-d tensor is its own logsumexp; integers compute in float32.
  CHECK(logsumexp(scalar_tensor(2.5), {}).item<float>() == 2.5f);
  CHECK(logsumexp(arange(int64_t{3}), {0}).dtype() == kFloat32);
}

TEST_CASE("logsumexp: infinite, NaN and empty rows as PyTorch") {
  const Tensor x = tensor(std::vector<float>{-INFINITY, -INFINITY, INFINITY, 1, NAN, 1, 1000, 1000}, {4, 2});
  const auto y = logsumexp(x, {1}).to_vector<float>();
  CHECK(y[0] == -INFINITY);
  CHECK(y[1] == INFINITY);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == doctest::Approx(1000 + std::log(2.0)));
  // An empty reduction is -inf; an empty result is empty.
  CHECK(logsumexp(zeros({2, 0}), {1}).to_vector<float>() == std::vector<float>{-INFINITY, -INFINITY});
  CHECK(logsumexp(zeros({0, 3}), {1}).shape() == Shape{0});
}

TEST_CASE("logsumexp: gradcheck and gradgradcheck") {
  manual_seed(32);
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  const Tensor x = randn({3, 4, 2}, kFloat64);
  CHECK(gradcheck([](const TensorList& in) { return logsumexp(in[0], {1}); }, {x}));
  CHECK(gradcheck([](const TensorList& in) { return logsumexp(in[0], {0, 2}, true); }, {x}));
  CHECK(gradgradcheck([](const TensorList& in) { return logsumexp(in[0], {2}); }, {x}));
}

TEST_CASE("logsumexp: bad input names the op") {
  check_error([] { logsumexp(randn({2, 3}), {2}); }, {"[logsumexp]", "dim"});
  check_error([] { logsumexp(randn({2, 3}), {1, -1}); }, {"[logsumexp]", "twice"});
  check_error([] { logsumexp(Tensor(), {0}); }, {"[logsumexp]", "undefined"});
  check_error([] { logsumexp(randn({2}) > 0.0, {0}); }, {"[logsumexp]", "bool"});
}
