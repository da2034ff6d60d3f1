// max/min/argmax/argmin, clamp, where, masked_fill, cat, stack, gather, index_select against
// references computed here, with gradchecks and error messages.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
constexpr Dtype kFloatDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

// Reference max/min along dim 1 of a [a, b, c] float64 tensor: values and first index.
std::pair<std::vector<double>, std::vector<int64_t>> extreme_ref(const Tensor& t, bool want_max) {
  const auto v = t.to_vector<double>();
  const int64_t a = t.size(0), b = t.size(1), c = t.size(2);
  std::vector<double> val;
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < a; ++i)
    for (int64_t k = 0; k < c; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < b; ++j) {
        const double x = v[(i * b + j) * c + k], y = v[(i * b + best) * c + k];
        if (want_max ? x > y : x < y) best = j;
      }
      val.push_back(v[(i * b + best) * c + k]);
      idx.push_back(best);
    }
  return {val, idx};
}
}  // namespace

TEST_CASE("max and min over the whole tensor and along a dim, with indices") {
  manual_seed(20);
  const Tensor x64 = randn({3, 5, 4}, kFloat64);
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), xr = x.to(kFloat64);
    const auto v = xr.to_vector<double>();
    CHECK(max(x).item<double>() == *std::max_element(v.begin(), v.end()));
    CHECK(x.min().item<double>() == *std::min_element(v.begin(), v.end()));
    CHECK(max(x).dtype() == d);
    for (bool want_max : {true, false}) {
      CAPTURE(want_max);
      auto [rv, ri] = extreme_ref(xr, want_max);
      auto [values, indices] = want_max ? max(x, 1) : min(x, 1);
      CHECK(values.shape() == Shape{3, 4});
      CHECK(indices.dtype() == kInt64);
      CHECK(values.to_vector<double>() == rv);
      CHECK(indices.to_vector<int64_t>() == ri);
      CHECK((want_max ? argmax(x, 1) : argmin(x, 1)).to_vector<int64_t>() == ri);
      auto [kv, ki] = want_max ? max(non_contiguous(x.reshape({15, 4})).reshape({3, 5, 4}), -2, true)
                               : min(non_contiguous(x.reshape({15, 4})).reshape({3, 5, 4}), -2, true);
      CHECK(kv.shape() == Shape{3, 1, 4});
      CHECK(ki.to_vector<int64_t>() == ri);
      CHECK((want_max ? argmax(x, 1, true) : argmin(x, 1, true)).shape() == Shape{3, 1, 4});
    }
  }
  // Integers, ties (the first wins), NaN (wins, as PyTorch), 0-d and Tensor::argmax.
  Tensor i = tensor(std::vector<int64_t>{3, 7, 7, -2});
  CHECK(max(i).item<int64_t>() == 7);
  CHECK(argmax(i, 0).item<int64_t>() == 1);
  CHECK(i.argmax(0).item<int64_t>() == 1);
  CHECK(argmin(i, 0).item<int64_t>() == 3);
  Tensor n = tensor(std::vector<float>{1, NAN, 3});
  CHECK(std::isnan(max(n).item<float>()));
  CHECK(argmax(n, 0).item<int64_t>() == 1);
  CHECK(max(scalar_tensor(2.0), 0).first.item<float>() == 2.0f);
  CHECK(argmax(zeros({0, 3}), 1).shape() == Shape{0});
}

TEST_CASE("max and min gradients: to the chosen element, shared among ties for the full reduction") {
  manual_seed(21);
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& x) { return max(x[0]); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& x) { return min(x[0]); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& x) { return max(x[0], 1).first; }, {randn({3, 4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return min(x[0], 0, true).first; }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& x) { return max(x[0].t(), -1).first; }, {randn({3, 4})}));
  Tensor t = tensor(std::vector<float>{1, 3, 3}).requires_grad_();
  max(t).backward();
  CHECK(t.grad().to_vector<float>() == std::vector<float>{0, 0.5f, 0.5f});
  Tensor u = tensor(std::vector<float>{1, 3, 3}).requires_grad_();
  max(u, 0).first.backward();
  CHECK(u.grad().to_vector<float>() == std::vector<float>{0, 1, 0});
}

TEST_CASE("max/min/argmax errors") {
  check_error([] { max(zeros({0, 2})); }, {"[max]", "[0, 2]"});
  check_error([] { min(zeros({2, 0}), 1); }, {"[min]", "empty", "[2, 0]"});
  check_error([] { argmax(zeros({2, 3}), 2); }, {"[argmax]", "dim 2"});
  check_error([] { argmin(zeros({2, 3}), -3); }, {"[argmin]", "dim -3"});
}

TEST_CASE("clamp matches float64, keeps NaN, and passes the gradient inside the bounds") {
  manual_seed(22);
  const Tensor x64 = randn({4, 6}, kFloat64) * 2.0;
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d);
    auto ref = [&](std::optional<double> lo, std::optional<double> hi) {
      auto v = x.to_vector<double>();
      for (double& e : v) {
        if (lo) e = std::max(e, *lo);
        if (hi) e = std::min(e, *hi);
      }
      return tensor(v, x.shape());
    };
    check_close(clamp(x, -0.5, 1.0), ref(-0.5, 1.0));
    check_close(clamp(non_contiguous(x), std::nullopt, 0.25), ref(std::nullopt, 0.25));
    check_close(x.clamp(-1.0, std::nullopt), ref(-1.0, std::nullopt));
    CHECK(clamp(x, 0.0, 1.0).dtype() == d);
  }
  auto c = clamp(tensor(std::vector<float>{NAN, -INFINITY, INFINITY, 5}), std::nullopt, 4.0).to_vector<float>();
  CHECK(std::isnan(c[0]));
  CHECK(c[1] == -INFINITY);
  CHECK(c[2] == 4.0f);
  CHECK(clamp(tensor(std::vector<float>{0, 5}), 3.0, 1.0).to_vector<float>() == std::vector<float>{1, 1});
  Tensor i = tensor(std::vector<int64_t>{-5, 0, 9});
  CHECK(clamp(i, -1.0, 3.0).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 3});
  CHECK(clamp(i, -1.0, 3.0).dtype() == kInt64);
  CHECK(clamp(i, 0.5, std::nullopt).dtype() == kFloat32);
  CHECK(autograd::gradcheck([](const TensorList& x) { return clamp(x[0], -0.7, 0.9); },
                            {tensor(std::vector<double>{-1.5, -0.3, 0.2, 0.85, 1.4, 3.0})}));
  Tensor g = tensor(std::vector<float>{-2, 0, 2}).requires_grad_();
  clamp(g, -1.0, 1.0).sum().backward();
  CHECK(g.grad().to_vector<float>() == std::vector<float>{0, 1, 0});
  check_error([] { clamp(zeros({2}), std::nullopt, std::nullopt); }, {"[clamp]", "at least one"});
  check_error([] { clamp(zeros({2}, kBool), 0.0, 1.0); }, {"[clamp]", "bool"});
}

TEST_CASE("where and masked_fill broadcast, promote and route gradients") {
  const Tensor cond = tensor(std::vector<bool>{true, false, true}, {3});
  const Tensor a = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = tensor(std::vector<double>{-1, -2}, {2, 1});
  Tensor w = where(cond, a, b);
  CHECK(w.dtype() == kFloat64);
  CHECK(w.shape() == Shape{2, 3});
  CHECK(w.to_vector<double>() == std::vector<double>{1, -1, 3, 4, -2, 6});
  CHECK(where(cond, tensor(std::vector<int64_t>{1, 2, 3}), scalar_tensor(0.5)).dtype() == kFloat32);
  // A transposed, non-contiguous branch: [[1, 3, 5], [2, 4, 6]].
  CHECK(where(cond, non_contiguous(a.reshape({3, 2})).t(), a).to_vector<float>() ==
        std::vector<float>{1, 2, 5, 2, 5, 6});
  CHECK(where(zeros({0}, kBool), zeros({0}), zeros({0})).shape() == Shape{0});
  Tensor m = masked_fill(a, tensor(std::vector<bool>{false, true}, {2, 1}), -7.0);
  CHECK(m.to_vector<float>() == std::vector<float>{1, 2, 3, -7, -7, -7});
  CHECK(masked_fill(a.to(kBFloat16), cond, 0.5).dtype() == kBFloat16);
  using autograd::gradcheck;
  manual_seed(23);
  CHECK(gradcheck([&](const TensorList& x) { return where(cond, x[0], x[1]); }, {randn({2, 3}), randn({2, 1})}));
  CHECK(gradcheck([&](const TensorList& x) { return masked_fill(x[0], cond, 3.0); }, {randn({2, 3})}));
  Tensor ga = ones({3}).requires_grad_(), gb = ones({1}).requires_grad_();
  where(cond, ga, gb).sum().backward();
  CHECK(ga.grad().to_vector<float>() == std::vector<float>{1, 0, 1});
  CHECK(gb.grad().to_vector<float>() == std::vector<float>{1});
  check_error([&] { where(ones({3}), a, b); }, {"[where]", "bool", "float32"});
  check_error([&] { where(cond, a, zeros({4})); }, {"[where]", "[4]"});
  check_error([&] { masked_fill(a, zeros({2, 3}, kInt64), 1.0); }, {"[masked_fill]", "bool", "int64"});
  check_error([&] { masked_fill(a, zeros({4}, kBool), 1.0); }, {"[masked_fill]", "[2, 3]", "[4]"});
}

TEST_CASE("cat and stack join along any dim, promote dtypes and split the gradient") {
  const Tensor a = arange(0.0, 6.0, 1.0, kFloat32).reshape({2, 3});
  const Tensor b = arange(6.0, 10.0, 1.0, kFloat32).reshape({2, 2});
  Tensor c = cat({a, b}, 1);
  CHECK(c.shape() == Shape{2, 5});
  CHECK(c.to_vector<float>() == std::vector<float>{0, 1, 2, 6, 7, 3, 4, 5, 8, 9});
  CHECK(cat({a, a}, 0).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  CHECK(cat({a, non_contiguous(b)}, -1).to_vector<float>() == c.to_vector<float>());
  CHECK(cat({a, a.to(kFloat64)}, 0).dtype() == kFloat64);
  CHECK(cat({a.to(kFloat16), a.to(kBFloat16)}, 0).dtype() == kFloat32);
  CHECK(cat({zeros({0}), a}, 0).shape() == Shape{2, 3});  // the legacy empty 1-d tensor is skipped
  CHECK(cat({zeros({0, 3}), a}, 0).shape() == Shape{2, 3});
  Tensor s = stack({a, a * 2.0}, 0);
  CHECK(s.shape() == Shape{2, 2, 3});
  CHECK(stack({a, a * 2.0}, 2).shape() == Shape{2, 3, 2});
  CHECK(stack({a, a * 2.0}, -1).to_vector<float>() == std::vector<float>{0, 0, 1, 2, 2, 4, 3, 6, 4, 8, 5, 10});
  CHECK(stack({scalar_tensor(1.0), scalar_tensor(2.0)}, 0).shape() == Shape{2});
  using autograd::gradcheck;
  manual_seed(24);
  CHECK(gradcheck([](const TensorList& x) { return cat({x[0], x[1], x[0]}, 1); }, {randn({2, 3}), randn({2, 1})}));
  CHECK(gradcheck([](const TensorList& x) { return stack({x[0], x[1]}, 1); }, {randn({2, 3}), randn({2, 3})}));
  check_error([&] { cat({a, b}, 0); }, {"[cat]", "[2, 3]", "[2, 2]", "dim 0"});
  check_error([&] { cat({a, zeros({6})}, 0); }, {"[cat]", "1 dims", "[6]", "[2, 3]"});
  check_error([&] { cat({scalar_tensor(1.0)}, 0); }, {"[cat]", "zero-dimensional"});
  check_error([&] { cat({}, 0); }, {"[cat]", "non-empty"});
  check_error([&] { cat({a, a}, 2); }, {"[cat]", "dim 2"});
  check_error([&] { stack({a, b}, 0); }, {"[stack]", "[2, 3]", "[2, 2]"});
  check_error([&] { stack({a, a}, 3); }, {"[stack]", "dim 3"});
}

TEST_CASE("gather and index_select match references; their gradients scatter-add back") {
  manual_seed(25);
  const Tensor x64 = randn({3, 4}, kFloat64);
  const Tensor idx = tensor(std::vector<int64_t>{3, 0, 0, 1, 2, 2}, {3, 2});
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d);
    const auto v = x.to_vector<double>();
    const auto iv = idx.to_vector<int64_t>();
    std::vector<double> g1, g0, s1, s0;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j) g1.push_back(v[i * 4 + iv[i * 2 + j]]);
    const auto i0 = tensor(std::vector<int64_t>{2, 1, 0, 2}, {1, 4});
    for (int64_t j = 0; j < 4; ++j) g0.push_back(v[i0.to_vector<int64_t>()[j] * 4 + j]);
    CHECK(gather(x, 1, idx).to_vector<double>() == g1);
    CHECK(gather(non_contiguous(x), -1, idx).to_vector<double>() == g1);
    CHECK(gather(x, 0, i0).to_vector<double>() == g0);
    CHECK(gather(x, 1, idx).dtype() == d);
    const Tensor sel = tensor(std::vector<int64_t>{2, 0, 2});
    for (int64_t i : {2, 0, 2})
      for (int64_t j = 0; j < 4; ++j) s0.push_back(v[i * 4 + j]);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j : {2, 0, 2}) s1.push_back(v[i * 4 + j]);
    CHECK(index_select(x, 0, sel).to_vector<double>() == s0);
    CHECK(index_select(non_contiguous(x), 1, sel).to_vector<double>() == s1);
    CHECK(index_select(x, 1, sel).shape() == Shape{3, 3});
  }
  CHECK(index_select(zeros({3, 4}), 0, zeros({0}, kInt64)).shape() == Shape{0, 4});
  CHECK(gather(zeros({3, 4}), 1, zeros({3, 0}, kInt64)).shape() == Shape{3, 0});
  // scatter_add / index_add: repeated indices accumulate.
  CHECK(scatter_add(zeros({2, 3}), 1, tensor(std::vector<int64_t>{0, 0, 2, 1}, {2, 2}), ones({2, 2}))
            .to_vector<float>() == std::vector<float>{2, 0, 0, 0, 1, 1});
  CHECK(index_add(zeros({3}), 0, tensor(std::vector<int64_t>{1, 1, 0}), tensor(std::vector<float>{1, 2, 4}))
            .to_vector<float>() == std::vector<float>{4, 3, 0});
  using autograd::gradcheck;
  CHECK(gradcheck([&](const TensorList& x) { return gather(x[0], 1, idx); }, {randn({3, 4})}));
  CHECK(gradcheck([&](const TensorList& x) { return gather(x[0], 0, idx); }, {randn({4, 3})}));
  const Tensor sel = tensor(std::vector<int64_t>{2, 0, 2});
  CHECK(gradcheck([&](const TensorList& x) { return index_select(x[0], 1, sel); }, {randn({2, 4})}));
  CHECK(gradcheck([&](const TensorList& x) { return index_select(x[0].t(), 0, sel); }, {randn({2, 4})}));
  CHECK(
      gradcheck([&](const TensorList& x) { return scatter_add(x[0], 1, idx, x[1]); }, {randn({3, 4}), randn({3, 3})}));
  CHECK(gradcheck([&](const TensorList& x) { return index_add(x[0], 0, sel, x[1]); }, {randn({4, 2}), randn({3, 2})}));
}

TEST_CASE("gather and index_select errors name the index, dim and shapes") {
  const Tensor x = zeros({3, 4});
  check_error(
      [&] {
        gather(x, 1, tensor(std::vector<int64_t>{0, 4}, {1, 2}));
      },
      {"[gather]", "index 4", "dim 1", "size 4"});
  check_error([&] { gather(x, 0, tensor(std::vector<int64_t>{-1}, {1, 1})); }, {"[gather]", "index -1"});
  check_error([&] { gather(x, 1, zeros({4, 1}, kInt64)); }, {"[gather]", "[4, 1]", "[3, 4]"});
  check_error([&] { gather(x, 1, zeros({3}, kInt64)); }, {"[gather]", "1 dims", "2"});
  check_error([&] { gather(x, 1, zeros({3, 1})); }, {"[gather]", "int64", "float32"});
  check_error(
      [&] {
        index_select(x, 0, tensor(std::vector<int64_t>{0, 3}));
      },
      {"[index_select]", "index 3", "dim 0", "size 3"});
  check_error([&] { index_select(x, 2, tensor(std::vector<int64_t>{0})); }, {"[index_select]", "dim 2"});
  check_error([&] { index_select(x, 0, zeros({1, 1}, kInt64)); }, {"[index_select]", "1-d", "[1, 1]"});
  check_error([&] { index_select(zeros({0, 2}), 0, tensor(std::vector<int64_t>{0})); }, {"[index_select]", "index 0"});
}
