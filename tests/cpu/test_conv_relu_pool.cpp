// conv2d_relu_max_pool2d, convolution + ReLU + 2x2 max pool in one op: the values and gradients
// of max_pool2d(conv2d_relu(...), 2) bit for bit (weight and bias gradients to rounding: their
// per-thread partial sums), NaN and ties included, in every float dtype; double backward; its
// autocast row and recorder events; errors; and nn::Sequential's use of it.
#include <cmath>
#include <cstring>
#include <random>

#include "framework/ops/conv_kernels.h"
#include "framework/ops/unary_kernels.h"
#include "helpers.h"
#include "kernels/cpu/conv/onednn.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::Tolerance;

namespace {

struct Geometry {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation = {1, 1};
  int64_t groups = 1;
};

const std::vector<Geometry> kGeometries = {
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}},             // even output (8x8)
    {{2, 3, 9, 10}, {5, 3, 3, 2}, {1, 1}, {0, 0}},            // odd rows and columns (7x9): a leftover row and column
    {{3, 2, 11, 11}, {3, 2, 3, 3}, {2, 1}, {1, 0}},           // stride, odd columns
    {{4, 1, 28, 28}, {8, 1, 3, 3}, {1, 1}, {0, 0}},           // the MNIST CNN's second layer's geometry
    {{1, 2, 40, 71}, {2, 2, 3, 3}, {1, 1}, {1, 1}},           // rows of 35 windows: two full vector steps and a tail
    {{3, 4, 9, 8}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},  // two groups: each sample pooled after both
    {{2, 3, 13, 12}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {2, 2}},   // dilation
};

Tensor leaf(const Tensor& t) { return t.defined() ? t.detach().requires_grad_() : Tensor(); }

// Output and gradients of the fused op and of the two ops, for the same inputs and incoming
// gradient (gy undefined: backward of sum(), an expanded gradient).
void check_fused_matches(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Geometry& g, const Tensor& gy) {
  Tensor x1 = leaf(x0), w1 = leaf(w0), b1 = leaf(b0), x2 = leaf(x0), w2 = leaf(w0), b2 = leaf(b0);
  const Tensor y1 = max_pool2d(conv2d_relu(x1, w1, b1, g.stride, g.padding, g.dilation, g.groups), {2});
  const Tensor y2 = conv2d_relu_max_pool2d(x2, w2, b2, g.stride, g.padding, g.dilation, g.groups);
  REQUIRE(bitwise_equal(y2, y1));
  if (gy.defined()) {
    (y1 * gy).sum().backward();
    (y2 * gy).sum().backward();
  } else {
    y1.sum().backward();
    y2.sum().backward();
  }
  CHECK(bitwise_equal(x2.grad(), x1.grad()));
  const Dtype d = x0.dtype();
  const Tolerance tol = d == kFloat64   ? Tolerance{1e-12, 1e-12}
                        : d == kFloat32 ? Tolerance{1e-5, 1e-5}
                                        : Tolerance{2e-2, 2e-2};
  check_close(w2.grad(), w1.grad(), tol);
  if (b0.defined()) check_close(b2.grad(), b1.grad(), tol);
}

}  // namespace

TEST_CASE("conv2d_relu_max_pool2d gives max_pool2d(conv2d_relu) in every float dtype and geometry") {
  manual_seed(31);
  for (Dtype d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    for (const Geometry& g : kGeometries) {
      CAPTURE(g.x);
      for (bool with_bias : {true, false}) {
        CAPTURE(with_bias);
        const Tensor x = randn(g.x).to(d), w = (randn(g.w) * 0.5).to(d);
        const Tensor b = with_bias ? randn({g.w[0]}).to(d) : Tensor();
        Shape pooled;
        {
          NoGradGuard no_grad;
          pooled = conv2d_relu_max_pool2d(x, w, b, g.stride, g.padding, g.dilation, g.groups).shape();
        }
        check_fused_matches(x, w, b, g, randn(pooled).to(d));
        check_fused_matches(x, w, b, g, Tensor());
      }
    }
  }
}

TEST_CASE("conv2d_relu_max_pool2d: ties, NaN, negative windows, unbatched input") {
  // Small integers: many windows hold equal maxima (the first one wins, as in max_pool2d) and
  // many are all negative (pooled 0 after the ReLU: no gradient).
  manual_seed(32);
  const Geometry g{{2, 2, 6, 7}, {3, 2, 2, 2}, {1, 1}, {0, 0}};
  for (Dtype d : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = randint(-2, 3, g.x).to(d), w = randint(-1, 2, g.w).to(d), b = randint(-1, 2, {3}).to(d);
    check_fused_matches(x, w, b, g, randn({2, 3, 2, 3}).to(d));
    Tensor with_nan = x.clone();
    with_nan.narrow(2, 1, 1).narrow(3, 2, 1).fill_(NAN);  // NaN propagates to the windows it reaches
    check_fused_matches(with_nan, w, b, g, randn({2, 3, 2, 3}).to(d));
    Tensor xn = leaf(with_nan);
    const Tensor y = conv2d_relu_max_pool2d(xn, w, b);
    CHECK(std::isnan(y.to(kFloat32).max().item<double>()));
  }
  const Tensor img = randn({3, 9, 9}), wt = randn({4, 3, 3, 3}), bias = randn({4});
  const Tensor y = conv2d_relu_max_pool2d(img, wt, bias, {1}, {1});
  CHECK(y.shape() == Shape{4, 4, 4});
  CHECK(bitwise_equal(y, max_pool2d(conv2d_relu(img, wt, bias, {1}, {1}), {2})));
  CHECK(conv2d_relu_max_pool2d(zeros({0, 3, 9, 9}), wt, bias).shape() == Shape{0, 4, 3, 3});
}

TEST_CASE("conv2d_relu_max_pool2d gradients: gradcheck, gradgradcheck and create_graph against the two ops") {
  // Fixed seed: no conv output within a finite-difference step of the ReLU's kink or of a tie.
  manual_seed(33);
  const TensorList inputs = {randn({2, 2, 5, 6}), randn({3, 2, 3, 3}), randn({3})};
  const auto fn = [](const TensorList& t) { return conv2d_relu_max_pool2d(t[0], t[1], t[2], {1, 1}, {1, 1}); };
  CHECK(autograd::gradcheck(fn, inputs));
  CHECK(autograd::gradgradcheck(fn, inputs));
  // A gradient penalty through both forms: the same second-order gradients.
  const auto penalty = [](bool fused, const TensorList& in) {
    Tensor x = leaf(in[0]), w = leaf(in[1]), b = leaf(in[2]);
    const Tensor y =
        fused ? conv2d_relu_max_pool2d(x, w, b, {1}, {1}) : max_pool2d(conv2d_relu(x, w, b, {1}, {1}), {2});
    const Tensor gx = autograd::grad({(y * y).sum()}, {x}, {}, std::nullopt, true)[0];
    (gx * gx).sum().backward();
    return TensorList{x.grad(), w.grad(), b.grad()};
  };
  const TensorList f64 = {inputs[0].to(kFloat64), inputs[1].to(kFloat64), inputs[2].to(kFloat64)};
  const TensorList fused = penalty(true, f64), composed = penalty(false, f64);
  for (size_t i = 0; i < fused.size(); ++i) check_close(fused[i], composed[i], Tolerance{1e-10, 1e-10});
}

TEST_CASE("conv2d_relu_max_pool2d records itself once, keeps no conv output, and runs in bfloat16 under autocast") {
  Tensor x = randn({2, 3, 8, 8}), w = (randn({4, 3, 3, 3}) * 0.2).detach().requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  Tensor loss;
  {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    OpRecorder rec;
    const Tensor y = conv2d_relu_max_pool2d(x, w, b, {1, 1}, {1, 1});
    CHECK(y.dtype() == kBFloat16);
    CHECK(y.shape() == Shape{2, 4, 4, 4});
    CHECK(rec.count("conv2d_relu_max_pool2d", false) == 1);
    CHECK(rec.count("conv2d_relu") == 0);
    CHECK(rec.count("max_pool2d") == 0);
    for (const OpEvent& e : rec.events())
      if (e.name == "conv2d_relu_max_pool2d") CHECK(e.inputs == std::vector<Dtype>{kBFloat16, kBFloat16, kBFloat16});
    loss = y.to(kFloat32).sum();
  }
  OpRecorder rec;
  loss.backward();
  CHECK(rec.count("conv2d_backward", true) == 1);
  CHECK(rec.count("relu_backward") == 0);
  CHECK(rec.count("max_pool2d_backward") == 0);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
}

TEST_CASE("conv2d_relu_max_pool2d errors name the op") {
  const Tensor x = zeros({2, 3, 8, 8});
  check_error(
      [&] {
        conv2d_relu_max_pool2d(x, zeros({4, 2, 3, 3}));
      },
      {"[conv2d_relu_max_pool2d]", "[2, 3, 8, 8]", "channels"});
  check_error(
      [&] {
        conv2d_relu_max_pool2d(zeros({1, 3, 3, 3}), zeros({4, 3, 3, 3}));
      },
      {"[conv2d_relu_max_pool2d]", "1x1", "2x2"});
}

TEST_CASE("nn::fuse runs a hook-free Conv2d, ReLU, MaxPool2d(2) as conv2d_relu_max_pool2d") {
  manual_seed(34);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(2, 4, 3))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(2))
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(4 * 3 * 3, 2));
  CHECK(model->fuse() == std::vector<std::string>{"0+1+2 -> conv2d_relu_max_pool2d"});
  const Tensor x = randn({3, 2, 8, 8});
  OpRecorder rec;
  const Tensor y = (*model)(x);
  CHECK(rec.count("conv2d_relu_max_pool2d") == 1);
  CHECK(rec.count("max_pool2d") == 0);
  y.sum().backward();
  const Tensor wgrad = model->parameters()[0].grad().clone();

  // A hook on the pool: conv2d_relu, then the pool as its own module (the hook sees its input).
  model->zero_grad();
  Tensor seen;
  auto handle = (*model)[2]->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor&) {
    seen = in;
    return std::optional<Tensor>();
  });
  rec.clear();
  const Tensor y_hooked = (*model)(x);
  CHECK(rec.count("conv2d_relu") == 1);
  CHECK(rec.count("max_pool2d") == 1);
  CHECK(rec.count("conv2d_relu_max_pool2d") == 0);
  REQUIRE(seen.defined());
  CHECK(seen.shape() == Shape{3, 4, 6, 6});
  CHECK(bitwise_equal(y_hooked, y));
  y_hooked.sum().backward();
  check_close(model->parameters()[0].grad(), wgrad, Tolerance{1e-5, 1e-5});
  handle.remove();

  // Pools other than a plain 2x2 stay separate.
  for (const nn::Pool2dOptions& o :
       {nn::Pool2dOptions{{1, 1}}, nn::Pool2dOptions{{}, {1, 1}}, nn::Pool2dOptions{{}, {0, 0}, {1, 1}, true}}) {
    auto other = std::make_shared<nn::Sequential>();
    other->push_back(std::make_shared<nn::Conv2d>(2, 4, 3))
        .push_back(std::make_shared<nn::ReLU>())
        .push_back(std::make_shared<nn::MaxPool2d>(2, o));
    CHECK(other->fuse() == std::vector<std::string>{"0+1 -> conv2d_relu"});
    rec.clear();
    (*other)(x);
    CHECK(rec.count("conv2d_relu_max_pool2d") == 0);
    CHECK(rec.count("max_pool2d") == 1);
  }
}

namespace {
// The backward kernel's rule on the bits, per element: the value passed on is 0 + g where the
// pooled value is positive (-0 becomes +0, a signalling NaN is quietened), else 0.
template <class U>
U expected_pass(U g, U pooled, U sign, U inf, U quiet) {
  const bool positive = pooled != 0 && pooled <= inf;
  if (!positive) return 0;
  if (g == sign) return 0;
  const bool nan = static_cast<U>(g & static_cast<U>(~sign)) > inf;
  return nan ? static_cast<U>(g | quiet) : g;
}

template <class U>
void check_backward_kernel(Dtype d, U sign, U inf, U quiet, const std::vector<U>& specials) {
  CAPTURE(dtype_name(d));
  std::mt19937 rng(35);
  for (int64_t ow = 1; ow <= 40; ++ow) {  // every tail length of the 16-window vector loop
    CAPTURE(ow);
    const int64_t oh = 3, h = 2 * oh + (ow % 2), w = 2 * ow + 1 - (ow % 2);  // odd and even leftovers
    Tensor g = randn({1, 2, oh, ow}).to(d), pooled = randn({1, 2, oh, ow}).to(d);
    Tensor which = randint(0, 4, {1, 2, oh, ow}).to(kUInt8);
    U* gb = static_cast<U*>(g.raw_data());
    U* pb = static_cast<U*>(pooled.raw_data());
    for (int64_t i = 0; i < g.numel(); ++i) {
      if (rng() % 3 == 0) gb[i] = specials[rng() % specials.size()];
      if (rng() % 3 == 0) pb[i] = specials[rng() % specials.size()];
    }
    Tensor out = full({1, 2, h, w}, 7.0, TensorOptions(d));  // every element must be overwritten
    relu_max_pool_2x2_backward_stub(kCPU, out, g, which, pooled);
    const U* ob = static_cast<const U*>(out.raw_data());
    const uint8_t* cb = static_cast<const uint8_t*>(which.raw_data());
    int64_t bad = 0;
    for (int64_t pl = 0; pl < 2; ++pl) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          U want = 0;
          if (y < 2 * oh && x < 2 * ow) {
            const int64_t o = (pl * oh + y / 2) * ow + x / 2;
            if (cb[o] == (y % 2) * 2 + (x % 2)) want = expected_pass<U>(gb[o], pb[o], sign, inf, quiet);
          }
          bad += ob[(pl * h + y) * w + x] != want;
        }
      }
    }
    CHECK(bad == 0);
  }
}
}  // namespace

TEST_CASE("conv2d_relu_max_pool2d's backward kernel on the bits: -0, NaN payloads, infinities, every row length") {
  check_backward_kernel<uint32_t>(kFloat32, 0x80000000u, 0x7f800000u, 0x00400000u,
                                  {0x80000000u, 0x0u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7f800000u, 0xff800000u,
                                   0x00000001u, 0x80000001u, 0x3f800000u, 0xbf800000u});
  check_backward_kernel<uint16_t>(kBFloat16, 0x8000, 0x7f80, 0x0040,
                                  {0x8000, 0x0, 0x7f81, 0xff81, 0x7fc0, 0x7f80, 0xff80, 0x0001, 0x8001, 0x3f80});
  check_backward_kernel<uint16_t>(kFloat16, 0x8000, 0x7c00, 0x0200,
                                  {0x8000, 0x0, 0x7c01, 0xfc01, 0x7e00, 0x7c00, 0xfc00, 0x0001, 0x8001, 0x3c00});
  check_backward_kernel<uint64_t>(kFloat64, uint64_t{1} << 63, 0x7ff0000000000000ull, uint64_t{1} << 51,
                                  {uint64_t{1} << 63, 0x0ull, 0x7ff0000000000001ull, 0x7ff8000000000000ull,
                                   0x7ff0000000000000ull, 0x1ull, 0x3ff0000000000000ull});
}

TEST_CASE("the CPU kernel pools each sample in its convolution pass, with the two kernels' bits") {
  // The fused forward stub against conv2d_forward_stub (ReLU in the kernel) then
  // max_pool_2x2_codes_stub: the same pooled values and codes. Where oneDNN's convolution
  // primitives run (bfloat16 on a CPU with bfloat16 units, float32 on one with AVX-512 or under
  // HG_CPU_ONEDNN_CONV=float32) each chunk of samples is pooled from a per-thread buffer; the
  // second shape's 100 KiB float32 samples make several chunks and a shorter last one there. The
  // first shape's 3 input channels run on the im2col path everywhere (few channels, see the next
  // test). The CPU's stub never declines.
  manual_seed(37);
  REQUIRE(conv2d_relu_max_pool_forward_stub.has(kCPU));
  Conv2dParams p;
  p.padding[0] = p.padding[1] = 1;
  struct Case {
    Shape x, w;
  };
  for (const Case& c : {Case{{5, 3, 11, 12}, {6, 3, 3, 3}}, Case{{13, 8, 40, 40}, {16, 8, 3, 3}}}) {
    const int64_t n = c.x[0], o = c.w[0], h = c.x[2], w = c.x[3];
    for (Dtype d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      CAPTURE(c.x);
      CAPTURE(dtype_name(d));
      const Tensor x = randn(c.x).to(d), wt = randn(c.w).to(d), b = randn({o}).to(d);
      const Tensor pooled = empty({n, o, h / 2, w / 2}, d), which = empty({n, o, h / 2, w / 2}, kUInt8);
      REQUIRE(conv2d_relu_max_pool_forward_stub(kCPU, pooled, which, x, wt, b, p, h, w));
      Conv2dParams relu = p;
      relu.relu = true;
      const Tensor conv = empty({n, o, h, w}, d), want = empty({n, o, h / 2, w / 2}, d),
                   want_which = empty({n, o, h / 2, w / 2}, kUInt8);
      conv2d_forward_stub(kCPU, conv, x, wt, b, relu);
      max_pool_2x2_codes_stub(kCPU, want, want_which, conv);
      CHECK(bitwise_equal(pooled, want));
      CHECK(bitwise_equal(which, want_which));
    }
  }
}

TEST_CASE("a forward with a product at most 36 deep runs on the im2col path, its weight gradient on oneDNN") {
  // Where oneDNN's convolution primitives take bfloat16 (or float32: with AVX-512 or under
  // HG_CPU_ONEDNN_CONV=float32), a forward whose products are short (input channels per group x
  // kernel area <= 36: a first layer's 1 or 3 channels with a 3x3 kernel) is left to conv.cpp's
  // own path (it only writes its output, NCHW, where the primitive writes channels-last and
  // reorders), while its weight gradient and deeper forwards stay on the primitives. The op's
  // values are those of the path that ran; the other tests compare the two paths.
  manual_seed(43);
  Conv2dParams p;
  for (Dtype d : {kBFloat16, kFloat32}) {
    CAPTURE(dtype_name(d));
    const Tensor probe = empty({1}, d);
    if (!cpu::onednn_conv2d_applies(probe)) {
      MESSAGE("skipped for ", dtype_name(d), ": oneDNN's convolutions do not take it on this CPU or build");
      continue;
    }
    struct Case {
      int64_t c, groups, k;
      bool primitive;
    };
    for (const Case& t : {Case{1, 1, 3, false}, Case{3, 1, 3, false}, Case{4, 1, 3, false}, Case{8, 2, 3, false},
                          Case{1, 1, 5, false}, Case{5, 1, 3, true}, Case{16, 2, 3, true}, Case{3, 1, 5, true}}) {
      CAPTURE(t.c);
      CAPTURE(t.groups);
      CAPTURE(t.k);
      const int64_t out = 12 - t.k + 1;
      const Tensor x = randn({3, t.c, 12, 12}).to(d), w = randn({8, t.c / t.groups, t.k, t.k}).to(d),
                   b = randn({8}).to(d);
      p.groups = t.groups;
      const Tensor y = empty({3, 8, out, out}, d), pooled = empty({3, 8, out / 2, out / 2}, d),
                   which = empty(pooled.shape(), kUInt8);
      CHECK(cpu::onednn_conv2d_forward(y, x, w, b, p) == t.primitive);
      CHECK(cpu::onednn_conv2d_relu_max_pool_forward(pooled, which, x, w, b, p, out, out) == t.primitive);
      const Tensor gw = empty(w.shape(), d), gb = empty({8}, d), gy = randn({3, 8, out, out}).to(d);
      CHECK(cpu::onednn_conv2d_backward_filter(gw, gb, gy, x, p));
    }
  }
}

TEST_CASE("float16 convolutions on oneDNN's float32 primitives: the float32 values rounded once") {
  // Where float32 convolutions run on oneDNN's primitives (AVX-512 CPUs, or
  // HG_CPU_ONEDNN_CONV=float32), float16 ones run on the same primitives, each chunk widened to
  // float32 before and rounded once after: bit for bit the float32 convolution of the widened
  // tensors, rounded to float16, in every pass. The large scale overflows float16 in the forward
  // and the weight gradient, which must give inf (the GradScaler looks for it), not a saturated
  // value. 13 samples make a shorter last chunk.
  if (!cpu::onednn_conv2d_applies(empty({1}, kFloat16))) {
    MESSAGE("skipped: float16 convolutions do not run on oneDNN's primitives on this CPU or build");
    return;
  }
  manual_seed(47);
  Conv2dParams p;
  p.padding[0] = p.padding[1] = 1;
  const auto half_of = [](const Tensor& t) { return t.to(kFloat16); };
  for (const double scale : {1.0, 3000.0}) {
    CAPTURE(scale);
    const Tensor x = (randn({13, 8, 12, 12}) * scale).to(kFloat16), w = randn({16, 8, 3, 3}).to(kFloat16),
                 b = randn({16}).to(kFloat16), gy = (randn({13, 16, 12, 12}) * scale).to(kFloat16);
    const Tensor x32 = x.to(kFloat32), w32 = w.to(kFloat32), b32 = b.to(kFloat32), gy32 = gy.to(kFloat32);
    for (const bool relu : {false, true}) {
      CAPTURE(relu);
      Conv2dParams q = p;
      q.relu = relu;
      const Tensor y = empty({13, 16, 12, 12}, kFloat16), y32 = empty({13, 16, 12, 12}, kFloat32);
      conv2d_forward_stub(kCPU, y, x, w, b, q);
      conv2d_forward_stub(kCPU, y32, x32, w32, b32, q);
      CHECK(bitwise_equal(y, half_of(y32)));
      if (scale > 1) CHECK(std::isinf(y.to(kFloat32).abs().max().item<double>()));
    }
    const Tensor gx = empty(x.shape(), kFloat16), gw = empty(w.shape(), kFloat16), gb = empty({16}, kFloat16);
    const Tensor gx32 = empty(x.shape(), kFloat32), gw32 = empty(w.shape(), kFloat32), gb32 = empty({16}, kFloat32);
    REQUIRE(conv2d_backward_stub(kCPU, gx, gw, gb, gy, x, w, p));
    REQUIRE(conv2d_backward_stub(kCPU, gx32, gw32, gb32, gy32, x32, w32, p));
    CHECK(bitwise_equal(gx, half_of(gx32)));
    CHECK(bitwise_equal(gw, half_of(gw32)));
    CHECK(bitwise_equal(gb, half_of(gb32)));
    if (scale > 1) CHECK(std::isinf(gw.to(kFloat32).abs().max().item<double>()));
  }
}

TEST_CASE("conv2d_backward_stub: both backward passes at once, with the bits of the two stubs") {
  // Where oneDNN's convolution primitives run, one call puts grad_out channels-last once for both
  // passes; it must give what conv2d_backward_data_stub and conv2d_backward_filter_stub give. With
  // and without a bias gradient; 13 samples make a shorter last chunk. Elsewhere it declines
  // (false) and the op runs the two stubs.
  manual_seed(41);
  REQUIRE(conv2d_backward_stub.has(kCPU));
  Conv2dParams p;
  p.padding[0] = 1;
  p.stride[1] = 2;
  for (Dtype d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (const bool bias : {false, true}) {
      CAPTURE(dtype_name(d));
      CAPTURE(bias);
      const Tensor x = randn({13, 4, 10, 9}).to(d), w = randn({6, 4, 3, 3}).to(d), gy = randn({13, 6, 10, 4}).to(d);
      const Tensor gx = empty(x.shape(), d), gw = empty(w.shape(), d), gb = bias ? empty({6}, d) : Tensor();
      const bool done = conv2d_backward_stub(kCPU, gx, gw, gb, gy, x, w, p);
      if (!done) continue;  // the two stubs run: the conv tests cover them
      CHECK(cpu::onednn_conv2d_applies(x));
      const Tensor want_gx = empty(x.shape(), d), want_gw = empty(w.shape(), d),
                   want_gb = bias ? empty({6}, d) : Tensor();
      conv2d_backward_data_stub(kCPU, want_gx, gy, w, p);
      conv2d_backward_filter_stub(kCPU, want_gw, want_gb, gy, x, p);
      CHECK(bitwise_equal(gx, want_gx));
      CHECK(bitwise_equal(gw, want_gw));
      if (bias) CHECK(bitwise_equal(gb, want_gb));
    }
  }
}

TEST_CASE("conv2d_relu_backward_stub: the output gradient made inside the passes, with the whole one's values") {
  // The CPU's stub makes each sample's (or, on oneDNN's primitives, each chunk's) convolution
  // output gradient from conv2d_relu's or conv2d_relu_max_pool2d's right before its backward
  // passes. It must give what the whole output gradient (relu's gradient, or
  // relu_max_pool_2x2_backward_stub's) gives through the two backward stubs: the input gradient
  // bit for bit (each sample's own products), the weight and bias gradients to rounding (partial
  // sums per thread or chunk). 13 samples of 16 x 40 x 40 outputs make several chunks and a
  // shorter last one where the primitives run; 7 x 9 outputs leave a row and a column outside
  // every pooling window. Without an input gradient, or a weight gradient, it computes the other.
  manual_seed(47);
  REQUIRE(conv2d_relu_backward_stub.has(kCPU));
  struct Case {
    Shape x, w;
    int64_t padding;
  };
  struct Wanted {
    bool x, w, bias;
  };
  for (const Case& c : {Case{{13, 8, 40, 40}, {16, 8, 3, 3}, 1}, Case{{3, 6, 9, 10}, {5, 6, 3, 2}, 0}}) {
    Conv2dParams p;
    p.padding[0] = p.padding[1] = c.padding;
    const int64_t n = c.x[0], o = c.w[0];
    const int64_t oh = c.x[2] + 2 * c.padding - c.w[2] + 1, ow = c.x[3] + 2 * c.padding - c.w[3] + 1;
    for (const bool pool : {true, false}) {
      for (Dtype d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
        for (const Wanted& want : {Wanted{true, true, true}, Wanted{true, true, false}, Wanted{false, true, true},
                                   Wanted{true, false, false}}) {
          CAPTURE(c.x);
          CAPTURE(pool);
          CAPTURE(dtype_name(d));
          CAPTURE(want.x);
          CAPTURE(want.w);
          CAPTURE(want.bias);
          const Tensor x = randn(c.x).to(d), w = randn(c.w).to(d), b = randn({o}).to(d);
          Conv2dReluGrad from;
          Tensor gy;  // the whole output gradient, for the reference
          if (pool) {
            from.out = empty({n, o, oh / 2, ow / 2}, d);
            from.which = empty(from.out.shape(), kUInt8);
            REQUIRE(conv2d_relu_max_pool_forward_stub(kCPU, from.out, from.which, x, w, b, p, oh, ow));
            from.grad = randn(from.out.shape()).to(d);
            gy = empty({n, o, oh, ow}, d);
            relu_max_pool_2x2_backward_stub(kCPU, gy, from.grad, from.which, from.out);
          } else {
            Conv2dParams relu = p;
            relu.relu = true;
            from.out = empty({n, o, oh, ow}, d);
            conv2d_forward_stub(kCPU, from.out, x, w, b, relu);
            from.grad = randn(from.out.shape()).to(d);
            gy = relu_gradient(from.grad, from.out);
          }
          const Tensor gx = want.x ? empty(x.shape(), d) : Tensor(), gw = want.w ? empty(w.shape(), d) : Tensor(),
                       gb = want.bias ? empty({o}, d) : Tensor();
          REQUIRE(conv2d_relu_backward_stub(kCPU, gx, gw, gb, from, x, w, p, oh, ow));
          // The weight gradients sum up to 20800 products of size ~1 in another order: float32
          // differs by ~1e-4 there.
          const Tolerance tol = d == kFloat64   ? Tolerance{1e-10, 1e-12}
                                : d == kFloat32 ? Tolerance{2e-3, 1e-4}
                                                : Tolerance{3e-2, 3e-2};
          if (want.x) {
            const Tensor want_gx = empty(x.shape(), d);
            conv2d_backward_data_stub(kCPU, want_gx, gy, w, p);
            CHECK(bitwise_equal(gx, want_gx));
          }
          if (want.w) {
            const Tensor want_gw = empty(w.shape(), d), want_gb = want.bias ? empty({o}, d) : Tensor();
            conv2d_backward_filter_stub(kCPU, want_gw, want_gb, gy, x, p);
            check_close(gw, want_gw, tol);
            if (want.bias) check_close(gb, want_gb, tol);
          }
        }
      }
    }
  }
  const Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}), out = empty({2, 4, 4, 4});
  CHECK_FALSE(conv2d_relu_backward_stub(kCPU, Tensor(), Tensor(), Tensor(), Conv2dReluGrad{out, out, Tensor()}, x, w,
                                        Conv2dParams{}, 4, 4));
}

TEST_CASE("conv2d_relu and conv2d_relu_max_pool2d on an input that needs no gradient: the weight gradients") {
  // A network's first layer: only the weight and bias gradients are wanted, made from the op's
  // output gradient inside the weight-gradient pass; against conv2d, relu and max_pool2d apart.
  manual_seed(53);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({9, 3, 14, 14}).to(d), w0 = randn({6, 3, 3, 3}).to(d), b0 = randn({6}).to(d);
    const Tensor gy = randn({9, 6, 6, 6}).to(d), gr = randn({9, 6, 12, 12}).to(d);
    Tensor w1 = leaf(w0), b1 = leaf(b0), w2 = leaf(w0), b2 = leaf(b0), w3 = leaf(w0), b3 = leaf(b0), w4 = leaf(w0),
           b4 = leaf(b0);
    (max_pool2d(relu(conv2d(x, w1, b1)), {2}) * gy).sum().backward();
    (conv2d_relu_max_pool2d(x, w2, b2) * gy).sum().backward();
    (relu(conv2d(x, w3, b3)) * gr).sum().backward();
    (conv2d_relu(x, w4, b4) * gr).sum().backward();
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : Tolerance{3e-2, 3e-2};
    check_close(w2.grad(), w1.grad(), tol);
    check_close(b2.grad(), b1.grad(), tol);
    check_close(w4.grad(), w3.grad(), tol);
    check_close(b4.grad(), b3.grad(), tol);
  }
}
