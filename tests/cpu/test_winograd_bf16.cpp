// The bfloat16 Winograd F(2x2, 3x3) kernel (kernels/cpu/conv/winograd_bf16.h) called directly,
// against float64 convolutions of the same bfloat16 values: forward (bias, ReLU) and input
// gradient, NCHW and NHWC, OIHW and OHWI weights, several tile blocks and output-channel blocks.
#include <cmath>
#include <limits>
#include <string>

#include "helpers.h"
#include "kernels/cpu/conv/algorithm.h"
#include "kernels/cpu/conv/winograd_bf16.h"

using namespace hg;

namespace {

Tensor nhwc_of(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }
Tensor nchw_of(const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); }

// The largest |got - want| over the largest |want|.
double relative_error(const Tensor& got, const Tensor& want) {
  return max(abs(got.to(kFloat64) - want)).item<double>() / max(abs(want)).item<double>();
}

struct Case {
  int64_t n, c, o, h, w;
};
// 13 tiles (a block of 12 and one over), 80 output channels (a block of 64 and one of 16),
// channel counts of ResNet's, non-square images.
const Case kCases[] = {{1, 16, 16, 2, 2}, {2, 32, 80, 4, 6}, {3, 64, 64, 8, 8}, {1, 48, 32, 6, 10}, {2, 16, 128, 8, 4}};

// Whether this machine runs the kernel; the test says it is skipped where not.
bool kernel_runs_here() {
  if (cpu::winograd_bf16_available()) return true;
  MESSAGE("skipped: this CPU or build has no AVX512_BF16");
  return false;
}

// The case as one line for a failure's report.
std::string describe(const Case& k) { return fmt::format("n {} c {} o {} {}x{}", k.n, k.c, k.o, k.h, k.w); }

}  // namespace

TEST_CASE("winograd_bf16_takes: channels in 16s, even images, NCHW planes in 16s") {
  CHECK(cpu::winograd_bf16_takes(64, 64, 32, 32, false));
  CHECK(cpu::winograd_bf16_takes(16, 32, 6, 10, true));
  CHECK_FALSE(cpu::winograd_bf16_takes(16, 32, 6, 10, false));  // 60 positions: not whole 16x16 transpositions
  CHECK_FALSE(cpu::winograd_bf16_takes(3, 64, 32, 32, true));
  CHECK_FALSE(cpu::winograd_bf16_takes(64, 24, 32, 32, true));
  CHECK_FALSE(cpu::winograd_bf16_takes(64, 64, 7, 8, true));
  CHECK_FALSE(cpu::winograd_bf16_takes(64, 64, 8, 0, true));
}

TEST_CASE(
    "bfloat16 Winograd F(2x2, 3x3): forward with bias and ReLU, and input gradient, NCHW and NHWC, OIHW and OHWI "
    "weights, within a few bfloat16 roundings of float64") {
  if (!kernel_runs_here()) return;
  manual_seed(71);
  for (const Case& k : kCases) {
    for (const bool nhwc : {false, true}) {
      for (const bool ohwi : {false, true}) {
        if (!cpu::winograd_bf16_takes(k.c, k.o, k.h, k.w, nhwc)) continue;
        const std::string shape = describe(k);
        CAPTURE(shape);
        CAPTURE(nhwc);
        CAPTURE(ohwi);
        const Tensor x = randn({k.n, k.c, k.h, k.w}).to(kBFloat16);
        const Tensor w = (randn({k.o, k.c, 3, 3}) * (1.0 / std::sqrt(9.0 * k.c))).to(kBFloat16);
        const Tensor bias = randn({k.o});
        const Tensor gy = randn({k.n, k.o, k.h, k.w}).to(kBFloat16);
        Tensor xr = x.to(kFloat64).requires_grad_();
        const Tensor yr = conv2d(xr, w.to(kFloat64), bias.to(kFloat64), {1, 1}, {1, 1});
        (yr * gy.to(kFloat64)).sum().backward();
        const Tensor ws = ohwi ? nhwc_of(w) : w;
        const auto layout = [&](const Tensor& t) { return nhwc ? nhwc_of(t) : t; };
        const auto back = [&](const Tensor& t) { return nhwc ? nchw_of(t) : t; };

        // Forward: relu(conv(x) + bias).
        Tensor u = empty({cpu::winograd_bf16_weights_count(k.c, k.o)}, kBFloat16);
        cpu::winograd_bf16_weights(ws.data_ptr<BFloat16>(), ohwi, k.o, k.c, false, u.data_ptr<BFloat16>());
        const Tensor xs = layout(x);
        Tensor y = full(nhwc ? std::vector<int64_t>{k.n, k.h, k.w, k.o} : std::vector<int64_t>{k.n, k.o, k.h, k.w}, 7.0,
                        kBFloat16);
        cpu::winograd_bf16_conv(xs.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), k.n, k.c, k.o, k.h, k.w, nhwc,
                                u.data_ptr<BFloat16>(), bias.data_ptr<float>(), true);
        const Tensor want = relu(yr.detach());
        // bfloat16's own rounding of the result is 2^-9 of it; the transforms' roundings add
        // about as much again (4e-3 to 5e-3 measured here).
        CHECK(relative_error(back(y), want) < 1e-2);
        // Without ReLU and bias the negative half is there too.
        cpu::winograd_bf16_conv(xs.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), k.n, k.c, k.o, k.h, k.w, nhwc,
                                u.data_ptr<BFloat16>(), nullptr, false);
        CHECK(relative_error(back(y), yr.detach() - bias.to(kFloat64).reshape({1, k.o, 1, 1})) < 1e-2);

        // Input gradient: gy convolved by the rotated kernel, o -> c channels.
        Tensor ug = empty({cpu::winograd_bf16_weights_count(k.o, k.c)}, kBFloat16);
        cpu::winograd_bf16_weights(ws.data_ptr<BFloat16>(), ohwi, k.o, k.c, true, ug.data_ptr<BFloat16>());
        const Tensor gys = layout(gy);
        Tensor gx = empty(nhwc ? std::vector<int64_t>{k.n, k.h, k.w, k.c} : std::vector<int64_t>{k.n, k.c, k.h, k.w},
                          kBFloat16);
        cpu::winograd_bf16_conv(gys.data_ptr<BFloat16>(), gx.data_ptr<BFloat16>(), k.n, k.o, k.c, k.h, k.w, nhwc,
                                ug.data_ptr<BFloat16>(), nullptr, false);
        CHECK(relative_error(back(gx), xr.grad()) < 1e-2);
      }
    }
  }
}

TEST_CASE("bfloat16 Winograd: ReLU keeps a NaN (an overflow stays visible to the GradScaler)") {
  if (!kernel_runs_here()) return;
  Tensor x = randn({1, 16, 4, 4}).to(kBFloat16);
  x.index_put_({0, 0, 1, 1}, std::numeric_limits<double>::quiet_NaN());
  const Tensor w = randn({16, 16, 3, 3}).to(kBFloat16);
  Tensor u = empty({cpu::winograd_bf16_weights_count(16, 16)}, kBFloat16);
  cpu::winograd_bf16_weights(w.data_ptr<BFloat16>(), false, 16, 16, false, u.data_ptr<BFloat16>());
  Tensor y = empty({1, 16, 4, 4}, kBFloat16);
  cpu::winograd_bf16_conv(x.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), 1, 16, 16, 4, 4, false,
                          u.data_ptr<BFloat16>(), nullptr, true);
  bool any_nan = false;
  for (const double v : y.to_vector<double>()) any_nan = any_nan || std::isnan(v);
  CHECK(any_nan);
}

TEST_CASE("bfloat16 Winograd: a shape it does not take is an hg::Error naming conv2d") {
  if (!kernel_runs_here()) return;
  const Tensor x = zeros({1, 16, 5, 5}, kBFloat16), u = zeros({cpu::winograd_bf16_weights_count(16, 16)}, kBFloat16);
  Tensor y = empty({1, 16, 5, 5}, kBFloat16);
  hg::test::check_error(
      [&] {
        cpu::winograd_bf16_conv(x.data_ptr<BFloat16>(), y.data_ptr<BFloat16>(), 1, 16, 16, 5, 5, true,
                                u.data_ptr<BFloat16>(), nullptr, false);
      },
      {"[conv2d]", "16 -> 16 channels at 5x5"});
}

TEST_CASE(
    "conv2d and conv2d_relu on bfloat16 3x3 layers (NCHW and channels-last): the forward is the Winograd kernel's "
    "result where the algorithm choice takes it, and all three results (through ReLU too) stay within bounds of "
    "float64") {
  manual_seed(73);
  const int64_t n = 2, c = 32, o = 48, side = 8;
  const Tensor x = randn({n, c, side, side}).to(kBFloat16);
  const Tensor w = (randn({o, c, 3, 3}) * (1.0 / std::sqrt(9.0 * c))).to(kBFloat16);
  const Tensor bias = randn({o}).to(kBFloat16);
  const Tensor gy = randn({n, o, side, side}).to(kBFloat16);
  Tensor xr = x.to(kFloat64).requires_grad_(), wr = w.to(kFloat64).requires_grad_();
  const Tensor yr = conv2d(xr, wr, bias.to(kFloat64), {1, 1}, {1, 1});
  (yr * gy.to(kFloat64)).sum().backward();
  cpu::ConvShape shape;
  shape.in_channels = c, shape.out_channels = o, shape.kh = shape.kw = 3, shape.oh = shape.ow = side;
  shape.padding_h = shape.padding_w = 1, shape.float32_primitives = false;
  const bool winograd = cpu::winograd_bf16_available() &&
                        cpu::conv_algorithm(shape, cpu::ConvPass::Forward) == cpu::ConvAlgorithm::Winograd;
  const std::string path =
      winograd ? "bfloat16 3x3 layers run on Winograd here" : "bfloat16 3x3 layers run direct here";
  MESSAGE(path);
  for (const bool channels_last : {false, true}) {
    for (const bool fused_relu : {false, true}) {
      CAPTURE(channels_last);
      CAPTURE(fused_relu);
      const MemoryFormat f = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
      Tensor xi = x.contiguous(f).detach().requires_grad_(), wi = w.contiguous(f).detach().requires_grad_();
      const Tensor y = fused_relu ? conv2d_relu(xi, wi, bias, {1, 1}, {1, 1}) : conv2d(xi, wi, bias, {1, 1}, {1, 1});
      const Tensor want = fused_relu ? relu(yr.detach()) : yr.detach();
      CHECK(relative_error(y, want) < 1e-2);
      if (winograd) {  // the op's forward is the kernel's, bit for bit
        const Tensor xs = channels_last ? nhwc_of(x) : x, ws = channels_last ? nhwc_of(w) : w;
        Tensor u = empty({cpu::winograd_bf16_weights_count(c, o)}, kBFloat16);
        cpu::winograd_bf16_weights(ws.data_ptr<BFloat16>(), channels_last, o, c, false, u.data_ptr<BFloat16>());
        const Tensor b32 = bias.to(kFloat32);
        Tensor direct = empty(
            channels_last ? std::vector<int64_t>{n, side, side, o} : std::vector<int64_t>{n, o, side, side}, kBFloat16);
        cpu::winograd_bf16_conv(xs.data_ptr<BFloat16>(), direct.data_ptr<BFloat16>(), n, c, o, side, side,
                                channels_last, u.data_ptr<BFloat16>(), b32.data_ptr<float>(), fused_relu);
        CHECK(hg::test::bitwise_equal(channels_last ? nhwc_of(y) : y.contiguous(), direct));
      }
      REQUIRE(y.requires_grad());
      (y.to(kFloat64) * gy.to(kFloat64)).sum().backward();
      REQUIRE(xi.grad().defined());
      if (!fused_relu) {
        CHECK(relative_error(xi.grad(), xr.grad()) < 1e-2);
        CHECK(relative_error(wi.grad(), wr.grad()) < 1e-2);
        continue;
      }
      // Through ReLU: float64's gradients of the output gradient masked where halfgrad's output is
      // positive (the two outputs' signs can differ at values within rounding of zero).
      const Tensor masked = gy.to(kFloat64) * (y.detach().to(kFloat64) > 0.0).to(kFloat64);
      Tensor xm = x.to(kFloat64).requires_grad_(), wm = w.to(kFloat64).requires_grad_();
      (conv2d(xm, wm, bias.to(kFloat64), {1, 1}, {1, 1}) * masked).sum().backward();
      CHECK(relative_error(xi.grad(), xm.grad()) < 1e-2);
      CHECK(relative_error(wi.grad(), wm.grad()) < 1e-2);
    }
  }
  // Channels-last activations with an OIHW weight: the gradient comes back in the weight's layout.
  Tensor xi = x.contiguous(MemoryFormat::ChannelsLast).detach().requires_grad_(), wi = w.detach().requires_grad_();
  const Tensor y = conv2d(xi, wi, bias, {1, 1}, {1, 1});
  CHECK(relative_error(y, yr.detach()) < 1e-2);
  (y.to(kFloat64) * gy.to(kFloat64)).sum().backward();
  CHECK(wi.grad().is_contiguous());
  CHECK(relative_error(xi.grad(), xr.grad()) < 1e-2);
  CHECK(relative_error(wi.grad(), wr.grad()) < 1e-2);
}

TEST_CASE(
    "bfloat16 Winograd weight gradient: OIHW and OHWI, bfloat16 rounded once, widened or float32 sums, with the "
    "bias's sums, within a few bfloat16 roundings of float64") {
  if (!kernel_runs_here()) return;
  manual_seed(79);
  // {2, 32, 80, 4, 6}: 12 tiles (6 pairs); {3, 64, 64, 8, 8}: 48; {1, 48, 32, 6, 10}: 15, an odd count.
  for (const Case& k : kCases) {
    for (const bool nhwc : {false, true}) {
      if (!cpu::winograd_bf16_takes(k.c, k.o, k.h, k.w, nhwc)) continue;
      const Tensor x = randn({k.n, k.c, k.h, k.w}).to(kBFloat16);
      const Tensor gy = randn({k.n, k.o, k.h, k.w}).to(kBFloat16);
      Tensor wr = zeros({k.o, k.c, 3, 3}, kFloat64).requires_grad_();
      (conv2d(x.to(kFloat64), wr, Tensor(), {1, 1}, {1, 1}) * gy.to(kFloat64)).sum().backward();
      const Tensor db_want = gy.to(kFloat64).sum({0, 2, 3});
      const Tensor xs = nhwc ? nhwc_of(x) : x, gys = nhwc ? nhwc_of(gy) : gy;
      for (const bool ohwi : {false, true}) {
        for (const auto form : {cpu::WinogradFilterGradient::Rounded, cpu::WinogradFilterGradient::Widened,
                                cpu::WinogradFilterGradient::Sums}) {
          const bool wide = form != cpu::WinogradFilterGradient::Rounded;
          const std::string shape = describe(k);
          CAPTURE(shape);
          CAPTURE(nhwc);
          CAPTURE(ohwi);
          CAPTURE(static_cast<int>(form));
          const Tensor want = ohwi ? nhwc_of(wr.grad()) : wr.grad();
          Tensor dw = full(want.shape(), 7.0, wide ? kFloat32 : kBFloat16), db = full({k.o}, 7.0);
          cpu::winograd_bf16_filter_gradient(xs.data_ptr<BFloat16>(), gys.data_ptr<BFloat16>(), k.n, k.c, k.o, k.h, k.w,
                                             nhwc, ohwi, dw.raw_data(), form, db.data_ptr<float>());
          CHECK(relative_error(dw, want) < 1e-2);
          CHECK(relative_error(db, db_want) < 1e-5);
          // Widened holds bfloat16 values (float32 bits with a zero low half); the sums mostly do not.
          const Tensor bf16_values = dw.to(kBFloat16).to(dw.dtype());
          if (form == cpu::WinogradFilterGradient::Widened) CHECK(hg::test::bitwise_equal(bf16_values, dw));
          if (form == cpu::WinogradFilterGradient::Sums) CHECK_FALSE(hg::test::bitwise_equal(bf16_values, dw));
        }
      }
    }
  }
}
