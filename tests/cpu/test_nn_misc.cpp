// embedding and dropout: values, gradients, reproducibility and errors.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

TEST_CASE("embedding looks rows up for any index shape and scatter-adds the gradient") {
  manual_seed(30);
  const Tensor w64 = randn({5, 3}, kFloat64);
  const Tensor idx = tensor(std::vector<int64_t>{4, 0, 4, 2, 1, 4}, {2, 3});
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor w = w64.to(d);
    const auto wv = w.to_vector<double>();
    std::vector<double> ref;
    for (int64_t i : idx.to_vector<int64_t>())
      for (int64_t j = 0; j < 3; ++j) ref.push_back(wv[static_cast<size_t>(i * 3 + j)]);
    Tensor e = embedding(w, idx);
    CHECK(e.shape() == Shape{2, 3, 3});
    CHECK(e.dtype() == d);
    CHECK(e.to_vector<double>() == ref);
    CHECK(embedding(w.t().contiguous().t(), idx.to(kInt32)).to_vector<double>() == ref);
  }
  CHECK(embedding(w64, scalar_tensor(2, kInt64)).shape() == Shape{3});
  CHECK(embedding(w64, zeros({0}, kInt64)).shape() == Shape{0, 3});
  Tensor w = zeros({5, 2}).requires_grad_();
  embedding(w, idx).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0, 3, 3});
  CHECK(autograd::gradcheck([&](const TensorList& x) { return embedding(x[0], idx); }, {randn({5, 3})}));
  check_error(
      [&] {
        embedding(w64, tensor(std::vector<int64_t>{1, 7}));
      },
      {"[embedding]", "index 7", "5 rows", "[5, 3]"});
  check_error([&] { embedding(w64, tensor(std::vector<int64_t>{-1})); }, {"[embedding]", "index -1"});
  check_error([&] { embedding(w64, zeros({2})); }, {"[embedding]", "int64", "float32"});
  check_error([&] { embedding(zeros({5}), idx); }, {"[embedding]", "2-d", "[5]"});
}

TEST_CASE("dropout scales kept elements, is reproducible under manual_seed, and is the identity in eval") {
  const Tensor x = ones({100, 100}) * 2.0;
  manual_seed(31);
  Tensor y = dropout(x, 0.3, true);
  const auto v = y.to_vector<float>();
  int64_t zeros_seen = 0;
  for (float e : v) {
    CHECK((e == 0.0f || std::abs(e - 2.0f / 0.7f) < 1e-6f));
    zeros_seen += e == 0.0f;
  }
  // 10,000 draws: the zero fraction is within 5 standard deviations (0.023) of p.
  CHECK(std::abs(static_cast<double>(zeros_seen) / 1e4 - 0.3) < 0.023);
  manual_seed(31);
  CHECK(dropout(x, 0.3, true).to_vector<float>() == v);
  CHECK(dropout(x, 0.3, true).to_vector<float>() != v);  // the generator moved on
  CHECK(dropout(x, 0.3, false).is_same(x));
  CHECK(dropout(x, 0.0, true).to_vector<float>() == x.to_vector<float>());
  CHECK(dropout(x.to(kBFloat16), 0.5).dtype() == kBFloat16);
  CHECK(dropout(zeros({0, 3}), 0.5).shape() == Shape{0, 3});
  // The gradient is the same mask: dy/dx = y / x.
  Tensor a = (ones({50}) * 3.0).requires_grad_();
  Tensor b = dropout(a.t(), 0.5);
  b.sum().backward();
  check_close(a.grad(), b.detach() / 3.0);
  check_error([&] { dropout(x, 1.01, true); }, {"[dropout]", "[0, 1]", "1.01"});
  CHECK(dropout(x, 1.0, true).abs().sum().item<double>() == 0.0);
  check_error([&] { dropout(x, -0.1, true); }, {"[dropout]", "-0.1"});
  check_error([&] { dropout(zeros({2}, kInt64), 0.5, true); }, {"[dropout]", "int64"});
}
