// conv2d, max_pool2d and avg_pool2d against direct float64 loops written here, gradients by
// gradcheck, every float dtype, strided inputs, empty batches and bad arguments.
#include <random>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {

struct ConvCase {
  Shape x, w;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// Direct 7-loop convolution in float64 of the values in x, w, b (b may be undefined).
Tensor conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(w.shape()[0], 0.0);
  const int64_t n = x.shape()[0], ci = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  const int64_t o = w.shape()[0], cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], og = o / c.groups;
  const int64_t oh = (h + 2 * c.ph - c.dh * (kh - 1) - 1) / c.sh + 1;
  const int64_t ow = (wd + 2 * c.pw - c.dw * (kw - 1) - 1) / c.sw + 1;
  std::vector<double> out(static_cast<size_t>(n * o * oh * ow));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double acc = bv[static_cast<size_t>(oc)];
          const int64_t g = oc / og;
          for (int64_t k = 0; k < cg; ++k)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * c.sh - c.ph + i * c.dh, ix = z * c.sw - c.pw + j * c.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += xv[static_cast<size_t>(((s * ci + g * cg + k) * h + iy) * wd + ix)] *
                       wv[static_cast<size_t>(((oc * cg + k) * kh + i) * kw + j)];
              }
          out[static_cast<size_t>(((s * o + oc) * oh + y) * ow + z)] = acc;
        }
  return tensor(out, {n, o, oh, ow});
}

Tensor run_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c) {
  return conv2d(x, w, b, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
}

const std::vector<ConvCase> kConvCases = {
    {{2, 3, 8, 8}, {4, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1},    // same padding
    {{2, 3, 9, 7}, {5, 3, 3, 2}, 2, 1, 1, 0, 1, 1, 1},    // stride, rectangular kernel, asymmetric pad
    {{1, 2, 10, 9}, {3, 2, 3, 3}, 1, 2, 2, 1, 2, 3, 1},   // dilation
    {{2, 4, 6, 6}, {6, 2, 3, 3}, 1, 1, 1, 1, 1, 1, 2},    // groups
    {{3, 4, 5, 5}, {4, 1, 3, 3}, 2, 2, 1, 1, 1, 1, 4},    // depthwise
    {{2, 6, 5, 4}, {3, 6, 1, 1}, 1, 1, 0, 0, 1, 1, 1},    // 1x1 (no packing)
    {{2, 4, 5, 4}, {4, 2, 1, 1}, 1, 1, 0, 0, 1, 1, 2},    // grouped 1x1
    {{2, 1, 28, 28}, {8, 1, 3, 3}, 1, 1, 0, 0, 1, 1, 1},  // MNIST first layer
};

}  // namespace

TEST_CASE("conv2d matches a float64 reference in every float dtype") {
  manual_seed(11);
  for (const ConvCase& c : kConvCases) {
    CAPTURE(c.x);
    CAPTURE(c.w);
    const Tensor x64 = randn(c.x, kFloat64), w64 = randn(c.w, kFloat64), b64 = randn({c.w[0]}, kFloat64);
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(dtype_name(d));
      const Tensor x = x64.to(d), w = w64.to(d), b = b64.to(d);
      // Reference on the rounded inputs: the only error left is float32 accumulation and the
      // final rounding to d.
      const Tensor ref = conv_reference(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), c);
      const Tensor ref_nb = conv_reference(x.to(kFloat64), w.to(kFloat64), Tensor(), c);
      const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : hg::test::tolerance(d);
      const Tensor y = run_conv(x, w, b, c);
      CHECK(y.dtype() == d);
      check_close(y, ref, tol);
      check_close(run_conv(x, w, Tensor(), c), ref_nb, tol);
      check_close(run_conv(non_contiguous(x), non_contiguous(w), non_contiguous(b), c), ref, tol);
    }
  }
}

TEST_CASE("conv2d: the contract call, unbatched input, single values and an empty batch") {
  hg::Tensor img = hg::randn({2, 3, 8, 8}), weight = hg::randn({4, 3, 3, 3}), bias = hg::zeros({4});
  auto c = hg::conv2d(img, weight, bias, /*stride=*/{1, 1}, /*padding=*/{1, 1});
  CHECK(c.shape() == Shape{2, 4, 8, 8});
  // Unbatched [C, H, W] gives [O, OH, OW], equal to the batched result's first sample.
  check_close(conv2d(img.select(0, 0), weight, bias, {1}, {1}), c.select(0, 0), Tolerance{1e-5, 1e-5});
  CHECK(conv2d(img, weight, Tensor(), {2}, {0}).shape() == Shape{2, 4, 3, 3});
  // A sliced (non-contiguous) batch.
  const Tensor big = randn({4, 3, 8, 8});
  check_close(conv2d(big.slice(0, 0, 4, 2), weight, bias, {1, 1}, {1, 1}),
              conv2d(big.slice(0, 0, 4, 2).contiguous(), weight, bias, {1, 1}, {1, 1}), Tolerance{1e-6, 1e-6});
  // N = 0: an empty output, and backward gives zero weight/bias gradients.
  Tensor w = randn({4, 3, 3, 3}).requires_grad_(), b = randn({4}).requires_grad_();
  Tensor x = zeros({0, 3, 8, 8}).requires_grad_();
  Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
  CHECK(y.shape() == Shape{0, 4, 8, 8});
  y.sum().backward();
  CHECK(w.grad().shape() == Shape{4, 3, 3, 3});
  CHECK(w.grad().abs().sum().item<float>() == 0.0f);
  CHECK(b.grad().abs().sum().item<float>() == 0.0f);
  CHECK(x.grad().shape() == Shape{0, 3, 8, 8});
}

TEST_CASE("conv2d gradients: gradcheck of input, weight and bias") {
  manual_seed(12);
  using autograd::gradcheck;
  for (const ConvCase& c : kConvCases) {
    if (c.x[2] > 12) continue;  // keep the finite differences cheap
    CAPTURE(c.x);
    CAPTURE(c.w);
    CHECK(gradcheck([&](const TensorList& t) { return run_conv(t[0], t[1], t[2], c); },
                    {randn(c.x), randn(c.w), randn({c.w[0]})}));
  }
  CHECK(gradcheck(
      [](const TensorList& t) {
        return conv2d(t[0], t[1], Tensor(), {2, 1}, {0, 1});
      },
      {randn({2, 2, 5, 5}), randn({3, 2, 2, 3})}));
}

TEST_CASE("conv2d backward in 16-bit and float32 matches float64 gradients") {
  manual_seed(13);
  const ConvCase c{{3, 4, 7, 6}, {6, 2, 3, 3}, 2, 1, 1, 1, 1, 2, 2};
  const Tensor x64 = randn(c.x, kFloat64), w64 = randn(c.w, kFloat64), b64 = randn({c.w[0]}, kFloat64);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    Tensor x = x64.to(d).requires_grad_(), w = w64.to(d).requires_grad_(), b = b64.to(d).requires_grad_();
    Tensor xr = x.detach().to(kFloat64).requires_grad_(), wr = w.detach().to(kFloat64).requires_grad_(),
           br = b.detach().to(kFloat64).requires_grad_();
    Tensor y = run_conv(x, w, b, c);
    const Tensor v = randn(y.shape(), d);
    y.backward(v);
    run_conv(xr, wr, br, c).backward(v.to(kFloat64));
    // Weight and bias gradients sum N*OH*OW terms: compare relative to their size.
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : hg::test::tolerance(d);
    check_close(x.grad(), xr.grad(), tol);
    check_close(w.grad(), wr.grad(), Tolerance{tol.atol * 10, tol.rtol});
    check_close(b.grad(), br.grad(), Tolerance{tol.atol * 10, tol.rtol});
    CHECK(w.grad().dtype() == d);
  }
}

TEST_CASE("conv2d records its backward as conv2d_backward") {
  Tensor x = randn({2, 3, 6, 6}).requires_grad_(), w = randn({4, 3, 3, 3}).requires_grad_();
  OpRecorder rec;
  conv2d(x, w).sum().backward();
  CHECK(rec.count("conv2d", false) == 1);
  CHECK(rec.count("conv2d_backward", true) == 1);
}

TEST_CASE("conv2d errors name the shapes") {
  const Tensor x = zeros({2, 3, 8, 8});
  check_error([&] { conv2d(x, zeros({4, 2, 3, 3})); }, {"[conv2d]", "[2, 3, 8, 8]", "[4, 2, 3, 3]", "channels"});
  check_error([&] { conv2d(x, zeros({4, 1, 3, 3}), Tensor(), {1}, {0}, {1}, 2); }, {"[conv2d]", "groups=2"});
  check_error(
      [&] {
        conv2d(zeros({2, 4, 8, 8}), zeros({3, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 2);
      },
      {"[conv2d]", "[3, 2, 3, 3]", "divisible"});
  check_error([&] { conv2d(x, zeros({4, 3, 3})); }, {"[conv2d]", "4-d weight", "[4, 3, 3]"});
  check_error([&] { conv2d(zeros({3, 8}), zeros({4, 3, 3, 3})); }, {"[conv2d]", "[3, 8]"});
  check_error([&] { conv2d(x, zeros({4, 3, 3, 3}), zeros({5})); }, {"[conv2d]", "bias", "[5]"});
  check_error([&] { conv2d(x, zeros({4, 3, 3, 3}, kBFloat16)); }, {"[conv2d]", "float32", "bfloat16"});
  check_error([&] { conv2d(x, zeros({4, 3, 9, 9})); }, {"[conv2d]", "[2, 3, 8, 8]", "smaller than"});
  check_error([&] { conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {0, 1}); }, {"[conv2d]", "stride"});
  check_error([&] { conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {1, 1, 1}); }, {"[conv2d]", "stride", "1 or 2"});
  check_error([&] { conv2d(zeros({2, 3, 8, 8}, kInt64), zeros({4, 3, 3, 3}, kInt64)); }, {"[conv2d]", "int64"});
}

// ---- pooling ----
namespace {

struct PoolCase {
  Shape x;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil;
};

// Output length as PyTorch documents it: floor (or ceil) of the span over the stride, plus one,
// dropping a last window that would start in the right padding.
int64_t pool_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

// max (avg = false) or average pooling in float64; avg uses PyTorch's divisor rule.
Tensor pool_reference(const Tensor& x, const PoolCase& c, bool avg, bool count_include_pad) {
  const auto xv = x.to_vector<double>();
  const int64_t planes = x.shape()[0] * x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t oh = pool_len(h, c.kh, c.sh, c.ph, c.dh, c.ceil), ow = pool_len(w, c.kw, c.sw, c.pw, c.dw, c.ceil);
  std::vector<double> out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        double best = -INFINITY, sum = 0;
        int64_t inside = 0;
        for (int64_t i = 0; i < c.kh; ++i)
          for (int64_t j = 0; j < c.kw; ++j) {
            const int64_t iy = y * c.sh - c.ph + i * c.dh, ix = z * c.sw - c.pw + j * c.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = xv[static_cast<size_t>((p * h + iy) * w + ix)];
            best = std::isnan(v) || std::isnan(best) ? NAN : std::max(best, v);
            sum += v, ++inside;
          }
        if (!avg) {
          out.push_back(best);
          continue;
        }
        // Window clipped to the padded image, counted with or without the padding.
        const int64_t y0 = y * c.sh - c.ph, x0 = z * c.sw - c.pw;
        const int64_t padded = (std::min(y0 + c.kh, h + c.ph) - y0) * (std::min(x0 + c.kw, w + c.pw) - x0);
        out.push_back(inside == 0 ? 0.0 : sum / static_cast<double>(count_include_pad ? padded : inside));
      }
  return tensor(out, {x.shape()[0], x.shape()[1], oh, ow});
}

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 8}, 2, 2, 2, 2, 0, 0, 1, 1, false},  // MNIST-style 2x2
    {{2, 2, 7, 9}, 3, 3, 2, 2, 1, 1, 1, 1, false},  // overlapping, padded
    {{1, 2, 7, 6}, 3, 2, 2, 2, 1, 1, 1, 1, true},   // ceil_mode
    {{2, 1, 9, 9}, 2, 3, 1, 2, 0, 1, 1, 1, true},   // rectangular
};

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match float64 references in every float dtype") {
  manual_seed(21);
  for (const PoolCase& c : kPoolCases) {
    CAPTURE(c.x);
    const Tensor x64 = randn(c.x, kFloat64);
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(dtype_name(d));
      const Tensor x = x64.to(d), xr = x.to(kFloat64);
      // Max pooling picks an input element: exact in every dtype.
      check_close(max_pool2d(x, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil),
                  pool_reference(xr, c, false, true), Tolerance{0, 0});
      check_close(max_pool2d(non_contiguous(x), {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil),
                  pool_reference(xr, c, false, true), Tolerance{0, 0});
      for (bool include : {true, false}) {
        CAPTURE(include);
        check_close(avg_pool2d(x, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, c.ceil, include),
                    pool_reference(xr, c, true, include));
      }
    }
  }
  // Dilation (max only).
  const Tensor x = randn({2, 2, 9, 8}, kFloat64);
  const PoolCase dil{{2, 2, 9, 8}, 3, 2, 1, 2, 1, 1, 2, 3, false};
  check_close(max_pool2d(x, {3, 2}, {1, 2}, {1, 1}, {2, 3}), pool_reference(x, dil, false, true), Tolerance{0, 0});
}

TEST_CASE("pooling: known values, default stride, NaN, ties, unbatched and empty inputs") {
  const Tensor x = arange(0.0, 16.0, 1.0, kFloat32).reshape({1, 1, 4, 4});
  CHECK(max_pool2d(x, {2}).to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  CHECK(avg_pool2d(x, {2}).to_vector<float>() == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f});
  CHECK(max_pool2d(x.reshape({1, 4, 4}), {2}).shape() == Shape{1, 2, 2});
  CHECK(max_pool2d(zeros({0, 3, 4, 4}), {2}).shape() == Shape{0, 3, 2, 2});
  CHECK(avg_pool2d(zeros({0, 3, 4, 4}), {2}).shape() == Shape{0, 3, 2, 2});
  // NaN wins its window, as in PyTorch.
  Tensor n = x.clone();
  n.select(2, 0).select(2, 0).fill_(NAN);
  const auto pooled = max_pool2d(n, {2}).to_vector<float>();
  CHECK(std::isnan(pooled[0]));
  CHECK(pooled[1] == 7.0f);
  // Ties send the whole gradient to the first maximum of the window.
  Tensor ones4 = ones({1, 1, 4, 4}).requires_grad_();
  max_pool2d(ones4, {2}).sum().backward();
  CHECK(ones4.grad().to_vector<float>() == std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0});
  // Overlapping windows add up their gradients.
  Tensor o = arange(0.0, 9.0, 1.0, kFloat32).reshape({1, 1, 3, 3}).requires_grad_();
  max_pool2d(o, {2}, {1}).sum().backward();
  CHECK(o.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 1, 0, 1, 1});
  // Empty batch backward.
  Tensor e = zeros({0, 2, 4, 4}).requires_grad_();
  avg_pool2d(e, {2}).sum().backward();
  CHECK(e.grad().shape() == Shape{0, 2, 4, 4});
}

TEST_CASE("pooling gradients: gradcheck and 16-bit backward") {
  manual_seed(22);
  using autograd::gradcheck;
  for (const PoolCase& c : kPoolCases) {
    CAPTURE(c.x);
    CHECK(gradcheck(
        [&](const TensorList& t) {
          return max_pool2d(t[0], {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil);
        },
        {randn(c.x)}));
    for (bool include : {true, false}) {
      CHECK(gradcheck(
          [&](const TensorList& t) {
            return avg_pool2d(t[0], {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, c.ceil, include);
          },
          {randn(c.x)}));
    }
  }
  CHECK(gradcheck(
      [](const TensorList& t) {
        return max_pool2d(t[0], {3, 2}, {1, 2}, {1, 1}, {2, 3});
      },
      {randn({1, 2, 9, 8})}));
  // bfloat16 backward of overlapping average windows equals the float64 gradient, rounded once.
  const Tensor x64 = randn({2, 3, 7, 7}, kFloat64);
  Tensor xb = x64.to(kBFloat16).requires_grad_(), xr = x64.to(kBFloat16).to(kFloat64).requires_grad_();
  const Tensor v = randn({2, 3, 3, 3}, kBFloat16);
  avg_pool2d(xb, {3}, {2}).backward(v);
  avg_pool2d(xr, {3}, {2}).backward(v.to(kFloat64));
  check_close(xb.grad(), xr.grad());
}

namespace {

// max_pool2d by PyTorch's rule in float64 (the first in-image element of a window seeds it, a
// later one wins when larger or NaN) and the input gradient for the output gradient gy: each
// element gets the sum, started from +0, of gy over the windows that picked it.
struct MaxPoolReference {
  std::vector<double> y, gx;
};
MaxPoolReference max_pool_reference(const std::vector<double>& xv, const PoolCase& c, const std::vector<double>& gy) {
  const int64_t planes = c.x[0] * c.x[1], h = c.x[2], w = c.x[3];
  const int64_t oh = pool_len(h, c.kh, c.sh, c.ph, c.dh, c.ceil), ow = pool_len(w, c.kw, c.sw, c.pw, c.dw, c.ceil);
  MaxPoolReference r{{}, std::vector<double>(xv.size(), 0.0)};
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        int64_t bi = -1;
        for (int64_t i = 0; i < c.kh; ++i)
          for (int64_t j = 0; j < c.kw; ++j) {
            const int64_t iy = y * c.sh - c.ph + i * c.dh, ix = z * c.sw - c.pw + j * c.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t k = (p * h + iy) * w + ix;
            const double v = xv[static_cast<size_t>(k)];
            if (bi < 0 || v > xv[static_cast<size_t>(bi)] || std::isnan(v)) bi = k;
          }
        r.y.push_back(xv[static_cast<size_t>(bi)]);
        r.gx[static_cast<size_t>(bi)] += gy[r.y.size() - 1];
      }
  return r;
}

// Values from a small set, so windows have ties, with NaNs and signed zeros mixed in.
std::vector<double> tie_values(int64_t n, uint32_t seed, bool nans) {
  std::mt19937 rng(seed);
  const double pick[] = {-1.0, 0.0, -0.0, 1.0, 2.0, 2.0, 0.5, -3.0};
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = nans && rng() % 16 == 0 ? NAN : pick[rng() % 8];
  return v;
}

}  // namespace

TEST_CASE("max_pool2d: the 2x2 fast path and the general loop agree on NaN, ties, odd sizes and -0") {
  const std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, 2, 2, 2, 2, 0, 0, 1, 1, false},   // fast path, exact fit
      {{1, 2, 7, 9}, 2, 2, 2, 2, 0, 0, 1, 1, false},   // fast path, last row and column unused
      {{1, 2, 7, 9}, 2, 2, 2, 2, 0, 0, 1, 1, true},    // ceil_mode: clipped windows, general loop
      {{2, 1, 4, 37}, 2, 2, 2, 2, 0, 0, 1, 1, false},  // long rows: vector body and tail
      {{1, 2, 8, 8}, 3, 3, 2, 2, 1, 1, 1, 1, false},   // overlapping windows with h = 2 oh
  };
  uint32_t seed = 31;
  for (const PoolCase& c : cases) {
    CAPTURE(c.x);
    CAPTURE(c.kh);
    CAPTURE(c.ceil);
    const int64_t numel = c.x[0] * c.x[1] * c.x[2] * c.x[3];
    const std::vector<double> xv = tie_values(numel, seed++, true);
    const Tensor probe = max_pool2d(zeros(c.x), {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil);
    const std::vector<double> gy = tie_values(probe.numel(), seed++, false);
    const MaxPoolReference ref = max_pool_reference(xv, c, gy);
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(dtype_name(d));
      // Every value and gradient sum here is exact in every dtype.
      Tensor x = tensor(xv, c.x).to(d).requires_grad_();
      const Tensor y = max_pool2d(x, {c.kh, c.kw}, {c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.ceil);
      check_close(y, tensor(ref.y, probe.shape()), Tolerance{0, 0});
      y.backward(tensor(gy, probe.shape()).to(d));
      check_close(x.grad(), tensor(ref.gx, c.x), Tolerance{0, 0});
      const auto gx = x.grad().to_vector<double>();
      for (size_t i = 0; i < gx.size(); ++i) {
        if (gx[i] == 0.0 && std::signbit(gx[i])) {
          FAIL_CHECK(fmt::format("gradient element {} is -0, expected +0", i));
          break;
        }
      }
    }
  }
  // The general loop (ceil_mode on an odd size) and the fast path (floor) on the same input:
  // the full windows give the same values and gradients.
  const std::vector<double> xv = tie_values(2 * 3 * 7 * 9, 7, true);
  Tensor a = tensor(xv, {2, 3, 7, 9}).requires_grad_(), b = tensor(xv, {2, 3, 7, 9}).requires_grad_();
  const Tensor general = max_pool2d(a, {2}, {2}, {0}, {1}, true).slice(2, 0, 3).slice(3, 0, 4);
  const Tensor fast = max_pool2d(b, {2}, {2}, {0}, {1}, false);
  check_close(fast, general, Tolerance{0, 0});
  const Tensor g = randn(fast.shape());
  general.backward(g);
  fast.backward(g);
  check_close(b.grad(), a.grad(), Tolerance{0, 0});
}

TEST_CASE("pooling errors name the shapes") {
  check_error([] { max_pool2d(zeros({4, 4}), {2}); }, {"[max_pool2d]", "[4, 4]"});
  check_error([] { max_pool2d(zeros({1, 1, 2, 2}), {3}); }, {"[max_pool2d]", "[1, 1, 2, 2]", "too small"});
  check_error([] { avg_pool2d(zeros({1, 1, 8, 8}), {2}, {2}, {2}); }, {"[avg_pool2d]", "half the kernel"});
  check_error([] { avg_pool2d(zeros({1, 1, 8, 8}), {2}, {0}); }, {"[avg_pool2d]", "positive"});
  check_error([] { max_pool2d(zeros({1, 1, 8, 8}, kInt64), {2}); }, {"[max_pool2d]", "int64"});
  check_error([] { max_pool2d(zeros({1, 1, 8, 8}), {2, 2, 2}); }, {"[max_pool2d]", "kernel", "1 or 2"});
}

TEST_CASE("float32 conv2d on the fast GEMM path matches float64, forward and both gradients") {
  // Per-sample products big enough for oneDNN (where it is built in): the backward-filter
  // product accumulates over samples into the same weight gradient, with and without groups
  // and padding. float64 runs on OpenBLAS, so the two paths check each other.
  manual_seed(77);
  for (const int64_t groups : {int64_t{1}, int64_t{2}}) {
    CAPTURE(groups);
    const Tensor x64 = randn({4, 8, 20, 20}, kFloat64), w64 = randn({16, 8 / groups, 3, 3}, kFloat64);
    const Tensor b64 = randn({16}, kFloat64), up = randn({4, 16, 20, 20}, kFloat64);
    Tensor x = x64.to(kFloat32).requires_grad_(), w = w64.to(kFloat32).requires_grad_(),
           b = b64.to(kFloat32).requires_grad_();
    Tensor xr = x64.clone().requires_grad_(), wr = w64.clone().requires_grad_(), br = b64.clone().requires_grad_();
    const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1}, {1, 1}, groups);
    const Tensor yr = conv2d(xr, wr, br, {1, 1}, {1, 1}, {1, 1}, groups);
    check_close(y, yr, {1e-4, 1e-4});
    y.backward(up.to(kFloat32));
    yr.backward(up);
    check_close(x.grad(), xr.grad(), {1e-4, 1e-4});
    check_close(w.grad(), wr.grad(), {1e-3, 1e-4});  // sums 4 x 400 products per entry
    check_close(b.grad(), br.grad(), {1e-3, 1e-4});
  }
}

TEST_CASE("conv2d with whole blocks of 16 channels (oneDNN's nChw16c for float32) matches float64") {
  // Input and output channels per group in multiples of 16, which the oneDNN path runs in its
  // blocked layout (conv/onednn_plan.h); float16 is widened onto the same float32 primitives.
  // Strided, grouped and 1x1 shapes, a batch of 1 and of 3 (one chunk or several per thread).
  manual_seed(78);
  struct Case {
    Shape x, w;
    int64_t stride, pad, groups;
  };
  for (const Case& c : {Case{{3, 32, 9, 9}, {48, 32, 3, 3}, 1, 1, 1}, Case{{1, 32, 10, 10}, {64, 32, 3, 3}, 2, 1, 1},
                        Case{{3, 32, 7, 7}, {64, 16, 3, 3}, 1, 1, 2}, Case{{3, 16, 8, 8}, {32, 16, 1, 1}, 2, 0, 1}}) {
    for (Dtype d : {kFloat32, kFloat16}) {
      CAPTURE(c.x);
      CAPTURE(dtype_name(d));
      const auto in_d = [&](const Tensor& t) { return t.to(d).to(kFloat64); };
      const Tensor x64 = in_d(randn(c.x, kFloat64)), w64 = in_d(randn(c.w, kFloat64) * 0.1);
      Tensor x = x64.to(d).requires_grad_(), w = w64.to(d).requires_grad_();
      Tensor xr = x64.clone().requires_grad_(), wr = w64.clone().requires_grad_();
      const Tensor y = conv2d(x, w, Tensor(), {c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, c.groups);
      const Tensor yr = conv2d(xr, wr, Tensor(), {c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, c.groups);
      const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : hg::test::tolerance(d);
      check_close(y, yr, tol);
      const Tensor up = in_d(randn(yr.shape(), kFloat64));
      y.backward(up.to(d));
      yr.backward(up);
      check_close(x.grad(), xr.grad(), tol);
      check_close(w.grad(), wr.grad(), d == kFloat32 ? Tolerance{1e-3, 1e-4} : Tolerance{2e-2, 2e-2});
    }
  }
}
