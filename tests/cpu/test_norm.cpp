// layer_norm and batch_norm against float64 loops written here, running statistics, gradcheck
// of every input, 16-bit inputs with float32 parameters, and bad arguments.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {

// Rows of `cols` values normalised with the biased variance, then scaled and shifted.
Tensor layer_norm_reference(const Tensor& x, int64_t cols, const Tensor& w, const Tensor& b, double eps) {
  auto v = x.to_vector<double>();
  const auto wv = w.defined() ? w.to_vector<double>() : std::vector<double>(static_cast<size_t>(cols), 1.0);
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(cols), 0.0);
  for (size_t r = 0; r * cols < v.size(); ++r) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) m += v[r * cols + j];
    m /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) var += (v[r * cols + j] - m) * (v[r * cols + j] - m);
    var /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) v[r * cols + j] = (v[r * cols + j] - m) / std::sqrt(var + eps) * wv[j] + bv[j];
  }
  return tensor(v, x.shape());
}

struct ChannelStats {
  std::vector<double> mean, var;  // biased variance
  int64_t count;
};
ChannelStats channel_stats(const Tensor& x) {
  const auto v = x.to_vector<double>();
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  ChannelStats st{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), n * s};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) st.mean[ch] += v[(i * c + ch) * s + j] / static_cast<double>(n * s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        const double d = v[(i * c + ch) * s + j] - st.mean[ch];
        st.var[ch] += d * d / static_cast<double>(n * s);
      }
  return st;
}

Tensor batch_norm_reference(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                            const Tensor& w, const Tensor& b, double eps) {
  auto v = x.to_vector<double>();
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  const auto wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        double& e = v[(i * c + ch) * s + j];
        e = (e - mean[ch]) / std::sqrt(var[ch] + eps) * wv[ch] + bv[ch];
      }
  return tensor(v, x.shape());
}

}  // namespace

TEST_CASE("layer_norm matches a float64 reference in every float dtype") {
  manual_seed(31);
  const Tensor x64 = randn({4, 3, 10}, kFloat64) * 3.0 + 5.0;  // a mean far from zero
  const Tensor w64 = randn({3, 10}, kFloat64), b64 = randn({3, 10}, kFloat64);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), w = w64.to(d), b = b64.to(d);
    const Tensor xr = x.to(kFloat64);
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-5, 1e-5} : hg::test::tolerance(d);
    // Last dim, last two dims, no affine parameters, non-contiguous input.
    check_close(layer_norm(x, {10}, w.select(0, 1), b.select(0, 2)),
                layer_norm_reference(xr, 10, w.select(0, 1).to(kFloat64), b.select(0, 2).to(kFloat64), 1e-5), tol);
    check_close(layer_norm(x, {3, 10}, w, b), layer_norm_reference(xr, 30, w.to(kFloat64), b.to(kFloat64), 1e-5), tol);
    check_close(layer_norm(x, {10}), layer_norm_reference(xr, 10, Tensor(), Tensor(), 1e-5), tol);
    check_close(layer_norm(non_contiguous(x), {10}, Tensor(), Tensor(), 1e-3),
                layer_norm_reference(xr, 10, Tensor(), Tensor(), 1e-3), tol);
    CHECK(layer_norm(x, {10}).dtype() == d);
  }
  // 16-bit input with float32 parameters (mixed precision layout): output keeps the input dtype.
  const Tensor xb = x64.to(kBFloat16);
  const Tensor y = layer_norm(xb, {3, 10}, w64.to(kFloat32), b64.to(kFloat32));
  CHECK(y.dtype() == kBFloat16);
  check_close(
      y, layer_norm_reference(xb.to(kFloat64), 30, w64.to(kFloat32).to(kFloat64), b64.to(kFloat32).to(kFloat64), 1e-5));
  CHECK(layer_norm(zeros({0, 5}), {5}).shape() == Shape{0, 5});
}

TEST_CASE("layer_norm gradients") {
  manual_seed(32);
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return layer_norm(t[0], {6}, t[1], t[2]); },
                  {randn({3, 6}), randn({6}), randn({6})}));
  CHECK(gradcheck(
      [](const TensorList& t) {
        return layer_norm(t[0], {2, 3}, t[1], t[2]);
      },
      {randn({2, 2, 3}), randn({2, 3}), randn({2, 3})}));
  CHECK(gradcheck([](const TensorList& t) { return layer_norm(t[0], {5}); }, {randn({4, 5})}));
  CHECK(gradcheck([](const TensorList& t) { return layer_norm(t[0].t(), {3}, t[1]); }, {randn({3, 4}), randn({3})}));
  // bfloat16 backward against float64.
  const Tensor x64 = randn({5, 16}, kFloat64);
  Tensor xb = x64.to(kBFloat16).requires_grad_(), wb = randn({16}, kBFloat16).requires_grad_();
  Tensor xr = xb.detach().to(kFloat64).requires_grad_(), wr = wb.detach().to(kFloat64).requires_grad_();
  const Tensor v = randn({5, 16}, kBFloat16);
  layer_norm(xb, {16}, wb).backward(v);
  layer_norm(xr, {16}, wr).backward(v.to(kFloat64));
  check_close(xb.grad(), xr.grad(), Tolerance{3e-2, 3e-2});
  check_close(wb.grad(), wr.grad(), Tolerance{3e-2, 3e-2});
}

TEST_CASE("batch_norm training: batch statistics, running stats updated with the unbiased variance") {
  manual_seed(33);
  for (const Shape& shape : {Shape{6, 3}, Shape{4, 3, 5, 5}}) {
    CAPTURE(shape);
    const Tensor x64 = randn(shape, kFloat64) * 2.0 + 1.0, w64 = randn({3}, kFloat64), b64 = randn({3}, kFloat64);
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(dtype_name(d));
      const Tensor x = x64.to(d), w = w64.to(d), b = b64.to(d);
      const ChannelStats st = channel_stats(x.to(kFloat64));
      // Running stats in float32 (the usual layout for 16-bit inputs) or in x's dtype.
      const Dtype sd = d == kFloat64 ? kFloat64 : kFloat32;
      Tensor rm = full({3}, 0.5, sd), rv = full({3}, 2.0, sd);
      const Tensor y = batch_norm(non_contiguous(x), rm, rv, w, b, /*training=*/true, 0.1, 1e-5);
      check_close(y, batch_norm_reference(x.to(kFloat64), st.mean, st.var, w.to(kFloat64), b.to(kFloat64), 1e-5),
                  d == kFloat32 ? Tolerance{1e-5, 1e-5} : hg::test::tolerance(d));
      std::vector<double> erm, erv;
      for (int c = 0; c < 3; ++c) {
        erm.push_back(0.9 * 0.5 + 0.1 * st.mean[c]);
        erv.push_back(0.9 * 2.0 + 0.1 * st.var[c] * st.count / (st.count - 1));
      }
      check_close(rm, tensor(erm), hg::test::tolerance(sd));
      check_close(rv, tensor(erv), hg::test::tolerance(sd));
      // Eval mode uses the running statistics.
      const Tensor ye = batch_norm(x, rm, rv, w, b, /*training=*/false);
      check_close(ye,
                  batch_norm_reference(x.to(kFloat64), rm.to_vector<double>(), rv.to_vector<double>(), w.to(kFloat64),
                                       b.to(kFloat64), 1e-5),
                  d == kFloat32 ? Tolerance{1e-5, 1e-5} : hg::test::tolerance(d));
    }
  }
  // Running stats laid out non-contiguously are updated too; none at all is fine when training.
  Tensor wide = zeros({6});
  Tensor rm = wide.slice(0, 0, 6, 2), rv = ones({3});
  const Tensor x = randn({4, 3});
  batch_norm(x, rm, rv, Tensor(), Tensor(), true);
  check_close(rm, tensor(channel_stats(x.to(kFloat64)).mean) * 0.1, Tolerance{1e-6, 1e-5});
  CHECK(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).shape() == Shape{4, 3});
  CHECK(batch_norm(zeros({0, 3, 2}), zeros({3}), ones({3}), Tensor(), Tensor(), false).shape() == Shape{0, 3, 2});
}

TEST_CASE("batch_norm gradients") {
  manual_seed(34);
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], true); },
                  {randn({4, 3, 2, 2}), randn({3}), randn({3})}));
  CHECK(gradcheck([](const TensorList& t) { return batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], true); },
                  {randn({5, 2}), randn({2}), randn({2})}));
  const Tensor rm = randn({3}, kFloat64), rv = rand({3}, kFloat64) + 0.5;
  CHECK(gradcheck([&](const TensorList& t) { return batch_norm(t[0], rm, rv, t[1], t[2], false); },
                  {randn({2, 3, 4}), randn({3}), randn({3})}));
  CHECK(gradcheck([](const TensorList& t) { return batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true); },
                  {randn({3, 2, 3})}));
}

TEST_CASE("batch_norm in float32 and 16 bits: lane blocks, tails and long planes against float64") {
  manual_seed(35);
  // Planes of a tail only (7), of 16-lane blocks and a tail (29 x 37), and longer than one float32
  // block of the kernel's sums (5000); the mean far from zero checks the two-pass variance.
  for (const Shape& shape : {Shape{3, 4, 7}, Shape{2, 3, 29, 37}, Shape{2, 2, 5000}}) {
    for (Dtype d : {kFloat32, kBFloat16, kFloat16}) {
      for (bool training : {true, false}) {
        CAPTURE(shape);
        CAPTURE(dtype_name(d));
        CAPTURE(training);
        const int64_t c = shape[1];
        // Values representable in d, so the float64 run sees the same inputs.
        const auto in_d = [&](const Tensor& t) { return t.to(d).to(kFloat64); };
        const Tensor x64 = in_d(randn(shape, kFloat64) * 3.0 + 20.0), v64 = in_d(randn(shape, kFloat64));
        const Tensor w64 = in_d(randn({c}, kFloat64)), b64 = in_d(randn({c}, kFloat64));
        const Tensor rm = full({c}, 19.5, kFloat32), rv = full({c}, 8.0, kFloat32);
        Tensor x = x64.to(d).requires_grad_(), w = w64.to(d).requires_grad_(), b = b64.to(d).requires_grad_();
        Tensor xr = x64.clone().requires_grad_(), wr = w64.clone().requires_grad_(), br = b64.clone().requires_grad_();
        const Tensor y = training ? batch_norm(x, Tensor(), Tensor(), w, b, true) : batch_norm(x, rm, rv, w, b, false);
        const Tensor yr = training ? batch_norm(xr, Tensor(), Tensor(), wr, br, true)
                                   : batch_norm(xr, rm.to(kFloat64), rv.to(kFloat64), wr, br, false);
        const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : hg::test::tolerance(d);
        check_close(y, yr, tol);
        y.backward(v64.to(d));
        yr.backward(v64);
        check_close(x.grad(), xr.grad(), tol);
        check_close(w.grad(), wr.grad(), tol);
        check_close(b.grad(), br.grad(), tol);
      }
    }
  }
}

TEST_CASE("norm errors name the shapes") {
  check_error([] { layer_norm(zeros({2, 5}), {4}); }, {"[layer_norm]", "[2, 5]", "[4]"});
  check_error([] { layer_norm(zeros({2, 5}), {5}, zeros({4})); }, {"[layer_norm]", "weight", "[4]"});
  check_error([] { layer_norm(zeros({2, 5}), {}); }, {"[layer_norm]", "at least one"});
  check_error(
      [] {
        layer_norm(zeros({2, 5}, kFloat16), {5}, zeros({5}, kBFloat16));
      },
      {"[layer_norm]", "bfloat16", "float16"});
  check_error(
      [] {
        batch_norm(zeros({2, 3}), zeros({4}), ones({4}), Tensor(), Tensor(), true);
      },
      {"[batch_norm]", "running_mean", "[4]", "[2, 3]"});
  check_error(
      [] {
        batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {"[batch_norm]", "more than 1 value", "[1, 3]"});
  check_error(
      [] {
        batch_norm(zeros({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false);
      },
      {"[batch_norm]", "eval"});
  check_error([] { batch_norm(zeros({3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }, {"[batch_norm]", "[3]"});
}
