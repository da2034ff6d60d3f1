// Elementwise ops against float64 references: every dtype, broadcasting, non-contiguous.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
// Applies f to every element of a float64 copy of t.
template <class F>
Tensor reference(const Tensor& t, F f) {
  auto v = t.to_vector<double>();
  for (double& x : v) x = f(x);
  return tensor(v, t.shape());
}
}  // namespace

TEST_CASE("binary arithmetic broadcasts and matches float64 in every float dtype") {
  manual_seed(1);
  const Tensor a64 = randn({4, 1, 3}, kFloat64), b64 = randn({5, 3}, kFloat64) + 3.0;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    // Round the inputs to d first so the reference sees the same inputs.
    const Tensor a = a64.to(d), b = b64.to(d);
    const Tensor ra = a.to(kFloat64), rb = b.to(kFloat64);
    const auto av = ra.contiguous(), bv = rb.contiguous();
    auto ref = [&](auto op) {
      Tensor out = zeros({4, 5, 3}, kFloat64);
      auto x = av.to_vector<double>(), y = bv.to_vector<double>();
      std::vector<double> r(60);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j)
          for (int k = 0; k < 3; ++k) r[(i * 5 + j) * 3 + k] = op(x[i * 3 + k], y[j * 3 + k]);
      return tensor(r, {4, 5, 3});
    };
    check_close(a + b, ref([](double x, double y) { return x + y; }));
    check_close(a - b, ref([](double x, double y) { return x - y; }));
    check_close(a * b, ref([](double x, double y) { return x * y; }));
    check_close(a / b, ref([](double x, double y) { return x / y; }));
    check_close(add(a, b, 2.5), ref([](double x, double y) { return x + 2.5 * y; }));
    check_close(maximum(a, b), ref([](double x, double y) { return std::max(x, y); }));
    check_close(non_contiguous(a) * non_contiguous(b), ref([](double x, double y) { return x * y; }));
    CHECK((a + b).dtype() == d);
  }
}

TEST_CASE("add and sub: a + b exactly rounded with alpha 1, a + alpha * b with other alphas") {
  // The CPU kernels add without the multiply when alpha is 1 (kernels/cpu/elementwise.cpp): the
  // correctly rounded a + b. Other alphas go through a + alpha * b, whose product the compiler may
  // round on its own or fuse into one multiply-add (it depends on the build's flags): either is
  // accepted there. Integers are exact either way.
  manual_seed(3);
  const Tensor xd = randn({1000}) * 100.0, yd = randn({1000}) * 100.0;
  const auto x = xd.to_vector<float>(), y = yd.to_vector<float>();
  for (double alpha : {1.0, 3.0, -0.5}) {
    CAPTURE(alpha);
    const auto a = static_cast<float>(alpha);
    const auto sum = add(xd, yd, alpha).to_vector<float>(), diff = sub(xd, yd, alpha).to_vector<float>();
    int wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (alpha == 1.0) {
        wrong += sum[i] != x[i] + y[i] || diff[i] != x[i] - y[i];
      } else {
        const float product = a * y[i];
        wrong += (sum[i] != x[i] + product && sum[i] != std::fma(a, y[i], x[i])) ||
                 (diff[i] != x[i] - product && diff[i] != std::fma(-a, y[i], x[i]));
      }
    }
    CHECK(wrong == 0);
    if (alpha == 1.0 || alpha == 3.0) {
      const Tensor xi = xd.to(kInt32), yi = yd.to(kInt32);
      const auto p = xi.to_vector<int32_t>(), q = yi.to_vector<int32_t>();
      std::vector<int32_t> isum(p.size()), idiff(p.size());
      const auto k = static_cast<int32_t>(alpha);
      for (size_t i = 0; i < p.size(); ++i) isum[i] = p[i] + k * q[i], idiff[i] = p[i] - k * q[i];
      CHECK(add(xi, yi, alpha).to_vector<int32_t>() == isum);
      CHECK(sub(xi, yi, alpha).to_vector<int32_t>() == idiff);
    }
  }
}

TEST_CASE("comparisons give bool tensors") {
  Tensor a = tensor(std::vector<float>{1, 2, 3});
  Tensor b = tensor(std::vector<float>{3, 2, 1});
  CHECK((a < b).dtype() == kBool);
  CHECK((a < b).to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK((a == b).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK((a >= 2.0).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK((a != b).to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("unary maths matches float64 in every float dtype") {
  manual_seed(2);
  const Tensor x64 = randn({7, 5}, kFloat64);
  const Tensor pos64 = rand({7, 5}, kFloat64) + 0.1;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), p = pos64.to(d);
    const Tensor xr = x.to(kFloat64), pr = p.to(kFloat64);
    check_close(exp(x), reference(xr, [](double v) { return std::exp(v); }));
    check_close(log(p), reference(pr, [](double v) { return std::log(v); }));
    check_close(log1p(p), reference(pr, [](double v) { return std::log1p(v); }));
    check_close(sqrt(p), reference(pr, [](double v) { return std::sqrt(v); }));
    check_close(rsqrt(p), reference(pr, [](double v) { return 1 / std::sqrt(v); }));
    check_close(reciprocal(p), reference(pr, [](double v) { return 1 / v; }));
    check_close(abs(x), reference(xr, [](double v) { return std::abs(v); }));
    check_close(-x, reference(xr, [](double v) { return -v; }));
    check_close(sigmoid(x), reference(xr, [](double v) { return 1 / (1 + std::exp(-v)); }));
    check_close(tanh(x), reference(xr, [](double v) { return std::tanh(v); }));
    check_close(relu(non_contiguous(x)), reference(xr, [](double v) { return v > 0 ? v : 0; }));
    check_close(gelu(x), reference(xr, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }));
    check_close(gelu(x, true), reference(xr, [](double v) {
                  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                }));
    check_close(softplus(x, 2.0, 1.0),
                reference(xr, [](double v) { return 2 * v > 1.0 ? v : std::log1p(std::exp(2 * v)) / 2; }));
    check_close(pow(p, 2.5), reference(pr, [](double v) { return std::pow(v, 2.5); }));
    check_close(erf(x), reference(xr, [](double v) { return std::erf(v); }));
  }
}

TEST_CASE("sigmoid and softplus stay finite for large inputs; relu keeps NaN") {
  Tensor big = tensor(std::vector<float>{-1000, 1000});
  CHECK(sigmoid(big).to_vector<float>() == std::vector<float>{0, 1});
  CHECK(softplus(big).to_vector<float>()[1] == 1000.0f);
  CHECK(std::isnan(relu(tensor(std::vector<float>{NAN})).item<float>()));
}

TEST_CASE("elementwise gradients match finite differences") {
  manual_seed(3);
  using autograd::gradcheck;
  auto unary = [](auto f, Tensor x) { CHECK(gradcheck([&](const TensorList& in) { return f(in[0]); }, {x})); };
  const Tensor x = randn({3, 4}), p = rand({3, 4}) + 0.5;
  unary([](const Tensor& t) { return exp(t); }, x);
  unary([](const Tensor& t) { return log(t); }, p);
  unary([](const Tensor& t) { return log1p(t); }, p);
  unary([](const Tensor& t) { return sqrt(t); }, p);
  unary([](const Tensor& t) { return rsqrt(t); }, p);
  unary([](const Tensor& t) { return reciprocal(t); }, p);
  unary([](const Tensor& t) { return abs(t); }, x);
  unary([](const Tensor& t) { return -t; }, x);
  unary([](const Tensor& t) { return sigmoid(t); }, x);
  unary([](const Tensor& t) { return tanh(t); }, x);
  unary([](const Tensor& t) { return relu(t); }, x);
  unary([](const Tensor& t) { return gelu(t); }, x);
  unary([](const Tensor& t) { return gelu(t, true); }, x);
  unary([](const Tensor& t) { return softplus(t, 1.5, 2.0); }, x);
  unary([](const Tensor& t) { return pow(t, 3.0); }, x);
  unary([](const Tensor& t) { return erf(t); }, x);
  auto binary = [](auto f, Tensor a, Tensor b) {
    CHECK(gradcheck([&](const TensorList& in) { return f(in[0], in[1]); }, {a, b}));
  };
  const Tensor row = randn({1, 4}), q = rand({3, 1}) + 0.5;
  binary([](const Tensor& a, const Tensor& b) { return a + b; }, x, row);
  binary([](const Tensor& a, const Tensor& b) { return sub(a, b, 0.5); }, x, row);
  binary([](const Tensor& a, const Tensor& b) { return a * b; }, x, q);
  binary([](const Tensor& a, const Tensor& b) { return a / b; }, x, q);
  binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); }, x, row);
  binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); }, x, row);
}

TEST_CASE("in-place ops write through, bump the version, and refuse grad-tracked tensors") {
  Tensor a = ones({2, 2});
  const auto v0 = a.version();
  a.add_(ones({2}), 2.0);
  a.mul_(2.0);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 6.0f));
  CHECK(a.version() == v0 + 2);
  a.sub_(ones({2, 2}));
  a.div_(5.0);
  CHECK(a.to_vector<float>() == std::vector<float>(4, 1.0f));
  a.zero_();
  CHECK(a.sum().item<float>() == 0.0f);
  Tensor h = ones({2}, kFloat16);
  h.add_(tensor(std::vector<float>{0.5f, 1.5f}));
  CHECK(h.dtype() == kFloat16);
  CHECK(h.to_vector<float>() == std::vector<float>{1.5f, 2.5f});
  Tensor w = ones({2}).requires_grad_();
  check_error([&] { w.add_(1.0); }, {"[add_]", "NoGradGuard"});
  {
    NoGradGuard ng;
    w.add_(1.0);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2});
  Tensor i = ones({2}, kInt64);
  check_error([&] { i.mul_(tensor(std::vector<float>{1.5f, 1.5f})); }, {"[mul_]", "float32", "int64"});
}

TEST_CASE("binary op errors name the op, shapes and devices") {
  check_error([] { zeros({2, 3}) + zeros({4}); }, {"[add]", "[2, 3]", "[4]"});
  check_error([] { zeros({2}, kBool) + zeros({2}, kBool); }, {"[add]", "bool"});
  check_error([] { exp(zeros({2}, kBool)); }, {"[exp]", "bool"});
}
