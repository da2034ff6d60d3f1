// View ops: shapes, strides, storage sharing, copies only where needed, gradients, errors.
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("views share storage and see writes") {
  Tensor a = arange(0.0, 12.0, 1.0, kFloat32).reshape({3, 4});
  Tensor t = a.t();
  CHECK(t.shape() == Shape{4, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.storage() == a.storage());
  CHECK(t.contiguous().to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor row = a.select(0, 1);
  CHECK(row.to_vector<float>() == std::vector<float>{4, 5, 6, 7});
  Tensor col = a.narrow(1, 1, 2);
  CHECK(col.shape() == Shape{3, 2});
  CHECK(col.to_vector<float>() == std::vector<float>{1, 2, 5, 6, 9, 10});
  Tensor stepped = a.slice(1, 0, 4, 2);
  CHECK(stepped.to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  row.fill_(-1);
  CHECK(a.to_vector<float>()[4] == -1);
  CHECK(a.unsqueeze(0).shape() == Shape{1, 3, 4});
  CHECK(a.unsqueeze(-1).shape() == Shape{3, 4, 1});
  CHECK(a.unsqueeze(0).squeeze().shape() == Shape{3, 4});
  CHECK(a.permute({1, 0}).to_vector<float>() == t.to_vector<float>());
  CHECK(a.flatten().shape() == Shape{12});
  CHECK(zeros({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(a.view({-1}).shape() == Shape{12});
  CHECK(tensor(std::vector<float>{1, 2}).reshape({2, 1}).expand({2, 3}).to_vector<float>() ==
        std::vector<float>{1, 1, 1, 2, 2, 2});
}

TEST_CASE("reshape copies a non-viewable layout, view refuses it") {
  Tensor a = arange(0.0, 6.0, 1.0, kFloat32).reshape({2, 3}).t();
  Tensor r = a.reshape({6});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  check_error([&] { a.view({6}); }, {"[view]", "reshape"});
}

TEST_CASE("view op errors name the op and the shapes") {
  Tensor a = zeros({2, 3});
  check_error([&] { a.reshape({4, 2}); }, {"[reshape]", "[4, 2]", "6"});
  check_error([&] { a.transpose(0, 2); }, {"[transpose]", "dim 2 out of range"});
  check_error([&] { a.expand({3, 3}); }, {"[expand]", "[2, 3]", "[3, 3]"});
  check_error([&] { a.select(0, 5); }, {"[select]", "index 5"});
  check_error([&] { a.permute({0, 0}); }, {"[permute]", "repeated"});
  check_error([&] { a.narrow(1, 2, 2); }, {"[narrow]"});
}

TEST_CASE("gradients flow through views") {
  auto check_view = [](auto fn, Shape shape) {
    CHECK(autograd::gradcheck([&](const TensorList& x) { return fn(x[0]); }, {randn(shape)}));
  };
  check_view([](const Tensor& x) { return x.t(); }, {3, 4});
  check_view([](const Tensor& x) { return x.reshape({4, 3}); }, {3, 4});
  check_view([](const Tensor& x) { return x.t().reshape({12}); }, {3, 4});
  check_view([](const Tensor& x) { return x.permute({2, 0, 1}); }, {2, 3, 4});
  check_view([](const Tensor& x) { return x.slice(1, 1, 4, 2); }, {3, 5});
  check_view([](const Tensor& x) { return x.select(0, 1); }, {3, 4});
  check_view([](const Tensor& x) { return x.unsqueeze(1).expand({3, 2, 4}); }, {3, 4});
  check_view([](const Tensor& x) { return x.squeeze(); }, {3, 1, 4});
  check_view([](const Tensor& x) { return x.flatten(); }, {3, 4});
  check_view([](const Tensor& x) { return x.contiguous(); }, {3, 4});
}

TEST_CASE("empty tensors") {
  Tensor e = zeros({0, 4});
  CHECK(e.numel() == 0);
  CHECK(e.t().shape() == Shape{4, 0});
  CHECK(e.reshape({4, 0}).shape() == Shape{4, 0});
  CHECK((e + 1.0).shape() == Shape{0, 4});
  CHECK(e.sum().item<float>() == 0.0f);
  CHECK(mm(zeros({2, 0}), zeros({0, 3})).to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("gradients of view, clone, contiguous, to and dropout match finite differences") {
  using autograd::gradcheck;
  manual_seed(21);
  CHECK(gradcheck([](const TensorList& x) { return x[0].view({4, 3}); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& x) { return x[0].clone() * 2.0; }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& x) { return x[0].t().contiguous() * 2.0; }, {randn({3, 4})}));
  // A round trip through float32 is linear, so a wide step keeps float32 rounding out of the
  // central difference.
  CHECK(gradcheck([](const TensorList& x) { return x[0].to(kFloat32).to(kFloat64); }, {randn({3, 4})},
                  {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4}));
  // The same seed before each forward gives the same mask every time gradcheck calls fn.
  CHECK(gradcheck(
      [](const TensorList& x) {
        manual_seed(5);
        return dropout(x[0], 0.3, true);
      },
      {randn({4, 5})}));
}
