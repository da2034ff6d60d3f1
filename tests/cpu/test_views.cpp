// View ops: shapes, strides, storage sharing, copies only where needed, gradients, errors.
#include <limits>

#include "framework/memory_overlap.h"
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

// ---- overlapping writes (issue 40, item 7) ----

TEST_CASE("in-place ops refuse partially overlapping views and allow exact or disjoint ones") {
  // The tester's case: a copy-first add would give [0, 1, 2, 4, 6, 8, 10, 12].
  Tensor x = arange(0.0, 8.0, 1.0, kFloat32);
  Tensor dst = x.narrow(0, 2, 6);
  check_error([&] { dst.add_(x.narrow(0, 0, 6)); }, {"[add_]", "same memory location"});
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});  // refused before any write
  check_error([&] { x.narrow(0, 0, 6).copy_(x.narrow(0, 2, 6)); }, {"[copy_]", "same memory location"});
  check_error([&] { dst.sub_(x.narrow(0, 1, 6)); }, {"[sub_]"});
  check_error([&] { dst.mul_(x.narrow(0, 0, 6)); }, {"[mul_]"});
  check_error([&] { dst.div_(x.narrow(0, 0, 6)); }, {"[div_]"});
  Tensor m = arange(0.0, 16.0, 1.0, kFloat32).reshape({4, 4});
  check_error([&] { m.add_(m.select(0, 0)); }, {"[add_]"});  // row 0 is read after it is written
  check_error([&] { m.copy_(m.t()); }, {"[copy_]"});         // same range, other strides
  Tensor flags = zeros({4}, kBool);
  check_error([&] { flags.narrow(0, 1, 3).masked_fill_(flags.narrow(0, 0, 3), 1.0); }, {"[masked_fill_]"});

  // The same memory, element for element: fine, as in PyTorch.
  Tensor y = arange(0.0, 6.0, 1.0, kFloat32);
  y.add_(y);
  y.mul_(y.view({6}));
  y.copy_(y);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 4, 16, 36, 64, 100});
  Tensor row = m.narrow(0, 1, 1);
  row.add_(row.view({4}));  // a broadcast that reads each element at its own place
  CHECK(row.to_vector<float>() == std::vector<float>{8, 10, 12, 14});
  // Disjoint views of one storage: halves, interleaved columns, even and odd elements.
  Tensor z = arange(0.0, 8.0, 1.0, kFloat32);
  z.narrow(0, 4, 4).add_(z.narrow(0, 0, 4));
  CHECK(z.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 6, 8, 10});
  Tensor pairs = arange(0.0, 8.0, 1.0, kFloat32).reshape({4, 2});
  pairs.select(1, 0).copy_(pairs.select(1, 1));
  CHECK(pairs.select(1, 0).to_vector<float>() == std::vector<float>{1, 3, 5, 7});
  z.slice(0, 0, 8, 2).sub_(z.slice(0, 1, 8, 2));
  Tensor w = arange(0.0, 24.0, 1.0, kFloat32).reshape({3, 8});
  w.narrow(1, 4, 4).add_(w.narrow(1, 0, 4));  // the two halves of the last dim interleave in memory
  CHECK(w.select(0, 1).to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 22, 24, 26});
  w.index_put_({indexing::Slice(), indexing::Slice(0, 4)}, w.narrow(1, 4, 4));
  check_error([&] { w.index_put_({indexing::Slice(), indexing::Slice(0, 4)}, w.narrow(1, 2, 4)); }, {"[index_put_]"});
}

TEST_CASE("in-place ops refuse tensors whose own elements overlap") {
  Tensor base = zeros({6});
  Tensor wide = base.narrow(0, 0, 1).expand({4});
  check_error([&] { wide.add_(1.0); }, {"[add_]", "same memory location"});
  check_error([&] { wide.zero_(); }, {"[zero_]"});
  check_error([&] { wide.copy_(ones({4})); }, {"[copy_]"});
  check_error([&] { wide.relu_(); }, {"[relu_]"});
  check_error([&] { wide.clamp_(0.0, 1.0); }, {"[clamp_]"});
  check_error([&] { wide.index_put_({0}, 1.0); }, {"[index_put_]"});
  // as_strided windows that collide: [0, 1, 2] and [1, 2, 3] share two elements.
  Tensor windows = as_strided(base, {2, 3}, {1, 1}, 0);
  check_error([&] { windows.fill_(1.0); }, {"[fill_]"});
  check_error([&] { as_strided(base, {2, 3}, {2, 1}, 0).fill_(1.0); }, {"[fill_]"});
  CHECK(internal_overlap(as_strided(base, {2, 3}, {3, 1}, 0)) == MemOverlap::No);
  CHECK(internal_overlap(as_strided(base, {2, 2}, {1, 2}, 0)) == MemOverlap::No);
  CHECK(internal_overlap(as_strided(base, {3, 2}, {1, 3}, 0)) == MemOverlap::No);
  CHECK(internal_overlap(as_strided(base, {2, 2}, {2, 2}, 0)) == MemOverlap::Partial);
  CHECK(overlap(base.narrow(0, 0, 3), base.narrow(0, 3, 3)) == MemOverlap::No);
  CHECK(overlap(base.narrow(0, 0, 3), base.narrow(0, 2, 3)) == MemOverlap::Partial);
  CHECK(overlap(base, base.view({2, 3}).view({6})) == MemOverlap::Full);
  CHECK(overlap(base, zeros({6})) == MemOverlap::No);
}

// ---- overflowing arguments (issue 40, item 8) ----

TEST_CASE("view and slicing ops reject overflowing arguments, naming the op") {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  Tensor x = arange(0.0, 4.0, 1.0, kFloat32);
  check_error([&] { x.narrow(0, kMax, 2); }, {"[narrow]", "out of range"});
  check_error([&] { x.narrow(0, 2, kMax); }, {"[narrow]"});
  check_error([&] { x.narrow(0, kMin, 2); }, {"[narrow]"});
  Tensor one = x.slice(0, 1, kMax, kMax);  // a huge step keeps one element, as in PyTorch
  CHECK(one.to_vector<float>() == std::vector<float>{1});
  CHECK(x.slice(0, kMin, kMax, 3).to_vector<float>() == std::vector<float>{0, 3});
  CHECK(x.slice(0, kMax, kMin).numel() == 0);
  check_error([&] { x.select(0, kMax); }, {"[select]"});
  check_error([&] { x.select(0, kMin); }, {"[select]"});
  check_error([&] { x.view({kMax, 2, -1}); }, {"[view]"});
  check_error([&] { x.reshape({kMax, kMax, 0}); }, {"[reshape]"});
  check_error([&] { x.reshape({kMin, -1}); }, {"[reshape]"});
  Tensor s = x.narrow(0, 0, 1);
  check_error([&] { s.expand({kMax, kMax}); }, {"[expand]"});
  check_error([&] { s.expand({-5}); }, {"[expand]"});
  check_error([&] { as_strided(x, {kMax}, {1}, 0); }, {"[as_strided]"});
  check_error([&] { as_strided(x, {2}, {kMax}, 0); }, {"[as_strided]"});
  check_error([&] { as_strided(x, {2}, {1}, kMax); }, {"[as_strided]"});
  check_error([&] { as_strided(x, {0}, {1}, -5); }, {"[as_strided]"});
  check_error([&] { x.unsqueeze(kMax); }, {"[unsqueeze]"});
  check_error([&] { x.unsqueeze(kMin); }, {"[unsqueeze]"});
  check_error([&] { x.transpose(kMin, 0); }, {"[transpose]"});
  check_error([&] { x.permute({kMax}); }, {"[permute]"});
  check_error([&] { x.split(std::vector<int64_t>{kMax, kMax, 6}); }, {"[split]"});
  check_error([&] { x.split(std::vector<int64_t>{kMax, 2, kMin + 2}); }, {"[split]"});
  CHECK(x.split(kMax).size() == 1);
  CHECK(x.chunk(kMax).size() == 4);
  check_error([&] { x.repeat({kMax, 2}); }, {"[repeat]"});
  check_error([&] { x.repeat({kMax / 2, kMax / 2}); }, {"[repeat]"});
  check_error([&] { zeros({kMax, 4}); }, {"[zeros]"});
  check_error([&] { ones({kMax / 2, kMax / 2}); }, {"[ones]"});
  check_error([&] { empty({kMax}); }, {"[empty]"});
  CHECK(x.index({indexing::Slice(kMin, kMax, kMax)}).to_vector<float>() == std::vector<float>{0});
}
