// The convolution algorithm choice (kernels/cpu/conv/algorithm.h) as a table over shapes and
// CPUs, HG_CPU_CONV's parsing, Winograd's accuracy on this machine where it runs, and the batched
// GEMM weight gradient (kernels/cpu/conv/filter_gemm.h) against float64.
#include <cmath>
#include <utility>

#include "helpers.h"
#include "kernels/cpu/conv/algorithm.h"
#include "kernels/cpu/conv/filter_gemm.h"

using namespace hg;
using hg::cpu::ConvAlgorithm;
using hg::cpu::ConvPass;
using hg::cpu::ConvShape;
using hg::cpu::CpuCaps;

namespace {

CpuCaps zen4() {
  CpuCaps c;
  c.avx2 = c.avx512 = c.avx512_bf16 = c.onednn = true;
  c.threads = 2;
  return c;
}

ConvShape resnet_conv(int64_t channels, int64_t side) {
  ConvShape s;
  s.in_channels = s.out_channels = channels;
  s.kh = s.kw = 3;
  s.oh = s.ow = side;
  s.padding_h = s.padding_w = 1;
  return s;
}

}  // namespace

TEST_CASE(
    "conv algorithm: Winograd for 3x3 stride-1 float32 and (padding 1, even) bfloat16 layers of 8x8 outputs and more, "
    "the weight gradient of "
    "4x4 images and shallow products on the GEMM, else direct") {
  const CpuCaps caps = zen4();
  struct Row {
    ConvShape shape;
    ConvPass pass;
    ConvAlgorithm want;
  };
  ConvShape strided = resnet_conv(64, 16), dilated = resnet_conv(64, 16), grouped = resnet_conv(64, 16),
            odd = resnet_conv(64, 16), bf16 = resnet_conv(64, 16), k1 = resnet_conv(64, 16);
  strided.stride_h = 2;
  dilated.dilation_w = 2;
  grouped.groups = 2;
  odd.in_channels = 3;  // the stem of a network on RGB images
  bf16.float32_primitives = false;
  k1.kh = k1.kw = 1;
  ConvShape stem = resnet_conv(64, 32), reduce = resnet_conv(256, 4), bf16_small = resnet_conv(512, 4),
            grouped_small = resnet_conv(512, 4);
  stem.in_channels = 3;  // 27 deep
  reduce.out_channels = 512, reduce.stride_h = reduce.stride_w = 2;
  bf16_small.float32_primitives = false;
  grouped_small.groups = 2;
  ConvShape bf16_reduce = reduce, bf16_stem = stem, bf16_unpadded = bf16, bf16_odd = resnet_conv(64, 15);
  bf16_unpadded.padding_h = bf16_unpadded.padding_w = 0;
  bf16_odd.float32_primitives = false;
  bf16_reduce.float32_primitives = bf16_stem.float32_primitives = false;
  const Row rows[] = {
      {resnet_conv(64, 32), ConvPass::Forward, ConvAlgorithm::Winograd},
      {resnet_conv(64, 32), ConvPass::InputGradient, ConvAlgorithm::Winograd},
      {resnet_conv(64, 32), ConvPass::WeightGradient, ConvAlgorithm::Direct},
      {resnet_conv(256, 8), ConvPass::Forward, ConvAlgorithm::Winograd},
      {resnet_conv(512, 4), ConvPass::Forward, ConvAlgorithm::Direct},  // 16 outputs: the transforms cost more
      {resnet_conv(512, 4), ConvPass::InputGradient, ConvAlgorithm::Direct},
      {strided, ConvPass::Forward, ConvAlgorithm::Direct},
      {dilated, ConvPass::Forward, ConvAlgorithm::Direct},
      {grouped, ConvPass::Forward, ConvAlgorithm::Direct},
      {odd, ConvPass::Forward, ConvAlgorithm::Direct},
      {bf16, ConvPass::Forward, ConvAlgorithm::Winograd},  // halfgrad's bfloat16 F(2x2, 3x3)
      {bf16, ConvPass::InputGradient, ConvAlgorithm::Winograd},
      {bf16_small, ConvPass::Forward, ConvAlgorithm::Direct},  // 16 outputs
      {bf16_unpadded, ConvPass::Forward, ConvAlgorithm::Direct},
      {bf16_odd, ConvPass::Forward, ConvAlgorithm::Direct},
      {k1, ConvPass::Forward, ConvAlgorithm::Direct},
      {resnet_conv(512, 4), ConvPass::WeightGradient, ConvAlgorithm::Gemm},  // 16 outputs
      {reduce, ConvPass::WeightGradient, ConvAlgorithm::Gemm},
      {stem, ConvPass::WeightGradient, ConvAlgorithm::Gemm},  // 27 deep
      {k1, ConvPass::WeightGradient, ConvAlgorithm::Gemm},    // 64 deep: a 1x1 projection
      {resnet_conv(256, 8), ConvPass::WeightGradient, ConvAlgorithm::Direct},
      {resnet_conv(128, 16), ConvPass::WeightGradient, ConvAlgorithm::Direct},
      {bf16_small, ConvPass::WeightGradient, ConvAlgorithm::Gemm},  // 16 outputs, on the bfloat16 GEMM
      {bf16_reduce, ConvPass::WeightGradient, ConvAlgorithm::Gemm},
      {bf16_stem, ConvPass::WeightGradient, ConvAlgorithm::Direct},  // shallow: float32's rule only
      {bf16, ConvPass::WeightGradient, ConvAlgorithm::Winograd},     // bfloat16 Winograd takes all three passes
      {grouped_small, ConvPass::WeightGradient, ConvAlgorithm::Direct},
      {resnet_conv(512, 4), ConvPass::Forward, ConvAlgorithm::Direct},
  };
  for (const Row& r : rows) {
    CAPTURE(r.shape.in_channels);
    CAPTURE(r.shape.oh);
    CAPTURE(static_cast<int>(r.pass));
    CHECK(cpu::conv_algorithm(r.shape, r.pass, caps) == r.want);
  }
  // Without AVX-512 or oneDNN there is no Winograd kernel.
  CpuCaps avx2 = caps;
  avx2.avx512 = avx2.avx512_bf16 = false;
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::Forward, avx2) == ConvAlgorithm::Direct);
  CpuCaps no_dnn = caps;
  no_dnn.onednn = false;
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::Forward, no_dnn) == ConvAlgorithm::Direct);
  // A forced algorithm applies where it can: Winograd at 4x4, direct at 32x32; never Winograd
  // on a shape it cannot take.
  CHECK(cpu::conv_algorithm(resnet_conv(512, 4), ConvPass::Forward, caps, ConvAlgorithm::Winograd) ==
        ConvAlgorithm::Winograd);
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::Forward, caps, ConvAlgorithm::Direct) ==
        ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(strided, ConvPass::Forward, caps, ConvAlgorithm::Winograd) == ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::WeightGradient, caps, ConvAlgorithm::Winograd) ==
        ConvAlgorithm::Direct);
  // A forced GEMM takes every float32 weight gradient of one group, and no other pass.
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::WeightGradient, caps, ConvAlgorithm::Gemm) ==
        ConvAlgorithm::Gemm);
  CHECK(cpu::conv_algorithm(resnet_conv(64, 32), ConvPass::Forward, caps, ConvAlgorithm::Gemm) ==
        ConvAlgorithm::Winograd);
  CHECK(cpu::conv_algorithm(grouped_small, ConvPass::WeightGradient, caps, ConvAlgorithm::Gemm) ==
        ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(resnet_conv(512, 4), ConvPass::WeightGradient, caps, ConvAlgorithm::Direct) ==
        ConvAlgorithm::Direct);
  // bfloat16 on the GEMM needs the CPU's bfloat16 units and oneDNN.
  CpuCaps no_bf16 = caps;
  no_bf16.avx512_bf16 = false;
  CHECK(cpu::conv_algorithm(bf16_small, ConvPass::WeightGradient, no_bf16) == ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(bf16_small, ConvPass::WeightGradient, no_dnn, ConvAlgorithm::Gemm) ==
        ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(bf16, ConvPass::WeightGradient, caps, ConvAlgorithm::Gemm) == ConvAlgorithm::Gemm);
  // bfloat16 Winograd needs the bfloat16 dot product (AVX512_BF16; an AMX-only CPU has no such
  // kernel here) and stays off under HG_CPU_ONEDNN=0; forced, it takes a 4x4 image too.
  CHECK(cpu::conv_algorithm(bf16, ConvPass::Forward, no_bf16) == ConvAlgorithm::Direct);
  CpuCaps native_off = caps;
  native_off.native_off = true;
  CHECK(cpu::conv_algorithm(bf16, ConvPass::Forward, native_off) == ConvAlgorithm::Direct);
  CHECK(cpu::conv_algorithm(bf16_small, ConvPass::Forward, caps, ConvAlgorithm::Winograd) == ConvAlgorithm::Winograd);
  CHECK(cpu::conv_algorithm(bf16, ConvPass::Forward, caps, ConvAlgorithm::Direct) == ConvAlgorithm::Direct);
}

TEST_CASE("HG_CPU_CONV names the algorithms; anything else is an error naming the valid ones") {
  CHECK(cpu::parse_conv_algorithm("direct") == ConvAlgorithm::Direct);
  CHECK(cpu::parse_conv_algorithm("winograd") == ConvAlgorithm::Winograd);
  CHECK(cpu::parse_conv_algorithm("gemm") == ConvAlgorithm::Gemm);
  hg::test::check_error([] { cpu::parse_conv_algorithm("fft"); },
                        {"[conv2d]", "HG_CPU_CONV='fft'", "direct, winograd, gemm"});
}

TEST_CASE("conv2d on a Winograd-sized float32 layer: forward and gradients close to float64") {
  // On a machine where the choice is Winograd (AVX-512 with oneDNN), this checks its rounding;
  // elsewhere the direct kernels, to the same bound.
  manual_seed(41);
  const Tensor x64 = randn({2, 32, 12, 12}, kFloat64), w64 = randn({32, 32, 3, 3}, kFloat64) * (1.0 / 17.0);
  const Tensor g64 = randn({2, 32, 12, 12}, kFloat64);
  Tensor x = x64.to(kFloat32).requires_grad_(), w = w64.to(kFloat32).requires_grad_();
  Tensor xr = x.detach().to(kFloat64).requires_grad_(), wr = w.detach().to(kFloat64).requires_grad_();
  const Tensor y = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  const Tensor yr = conv2d(xr, wr, Tensor(), {1, 1}, {1, 1});
  (y * g64.to(kFloat32)).sum().backward();
  (yr * g64).sum().backward();
  // Relative to each result's largest magnitude (Zen 4, 2026-11-29): Winograd F(4x4, 3x3) in
  // float32 1.2e-6 (forward) and 1.1e-6 (input gradient) here, 2e-6 to 4e-6 on ResNet's 64x32x32
  // and 256x8x8 layers; the direct kernels 3e-7.
  auto rel = [](const Tensor& got, const Tensor& ref) {
    return max(abs(got.to(kFloat64) - ref)).item<double>() / max(abs(ref)).item<double>();
  };
  CHECK(rel(y, yr) < 2e-5);
  CHECK(rel(x.grad(), xr.grad()) < 2e-5);
  CHECK(rel(w.grad(), wr.grad()) < 2e-5);
}

TEST_CASE(
    "the batched GEMM weight gradient (NCHW columns into OIHW, NHWC patches into OHWI; float32, and bfloat16 rounded "
    "once or kept in float32) equals float64's across strides, padding, dilation, bias, 1x1 kernels and batches split "
    "into GEMMs") {
  struct Case {
    int64_t n, c, h, w, o, kh, kw, stride, padding, dilation;
  };
  // The 32x32 case's float32 columns take 2.25 MiB a sample, so its 8 samples run as GEMMs of 3,
  // 3 and 2 (8 MiB each at most), adding into the gradient; bfloat16 is always one GEMM.
  const Case cases[] = {{2, 3, 9, 7, 5, 3, 3, 1, 1, 1},  {3, 32, 8, 8, 48, 3, 3, 2, 1, 1},
                        {2, 5, 9, 9, 4, 3, 2, 1, 0, 2},  {4, 16, 8, 8, 32, 1, 1, 2, 0, 1},
                        {1, 2, 5, 5, 3, 5, 5, 1, 2, 1},  {8, 64, 32, 32, 4, 3, 3, 1, 1, 1},
                        {8, 64, 4, 4, 64, 3, 3, 1, 1, 1}};
  manual_seed(43);
  const auto nhwc_of = [](const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); };
  for (const Case& k : cases) {
    for (const Dtype d : {kFloat32, kBFloat16}) {
      for (const bool nhwc : {false, true}) {
        CAPTURE(k.c);
        CAPTURE(k.kh);
        CAPTURE(k.stride);
        CAPTURE(dtype_name(d));
        CAPTURE(nhwc);
        const Tensor x = randn({k.n, k.c, k.h, k.w}).to(d), w = randn({k.o, k.c, k.kh, k.kw}).to(d);
        Tensor wr = w.to(kFloat64).requires_grad_(), br = zeros({k.o}, kFloat64).requires_grad_();
        const Tensor yr =
            conv2d(x.to(kFloat64), wr, br, {k.stride, k.stride}, {k.padding, k.padding}, {k.dilation, k.dilation});
        const Tensor gy = randn(yr.shape()).to(d);
        (yr * gy.to(kFloat64)).sum().backward();
        Conv2dParams p;
        p.stride[0] = p.stride[1] = k.stride, p.padding[0] = p.padding[1] = k.padding;
        p.dilation[0] = p.dilation[1] = k.dilation;
        const auto g = cpu::conv_geometry(k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, yr.size(2), yr.size(3), p);
        const Tensor xs = nhwc ? nhwc_of(x) : x, gys = nhwc ? nhwc_of(gy) : gy;
        const Tensor want = nhwc ? nhwc_of(wr.grad()) : wr.grad();
        Tensor dw = full(want.shape(), 7.0).to(d), db = full({k.o}, 7.0);  // overwritten, not added to
        if (d == kFloat32 && nhwc) {
          cpu::filter_gradient_gemm_nhwc(g, xs.data_ptr<float>(), gys.data_ptr<float>(), dw.data_ptr<float>(),
                                         db.data_ptr<float>());
        } else if (d == kFloat32) {
          cpu::filter_gradient_gemm(g, xs.data_ptr<float>(), gys.data_ptr<float>(), dw.data_ptr<float>(),
                                    db.data_ptr<float>());
        } else if (nhwc) {
          cpu::filter_gradient_gemm_nhwc(g, xs.data_ptr<BFloat16>(), gys.data_ptr<BFloat16>(), dw.data_ptr<BFloat16>(),
                                         db.data_ptr<float>());
        } else {
          cpu::filter_gradient_gemm(g, xs.data_ptr<BFloat16>(), gys.data_ptr<BFloat16>(), dw.data_ptr<BFloat16>(),
                                    db.data_ptr<float>());
        }
        // float32: its sums' error; bfloat16: one rounding (half a step, 2^-8 of the value) more.
        const Tensor err = abs(dw.to(kFloat64) - want);
        const double scale = max(abs(want)).item<double>();
        CHECK(max(err - abs(want) * (d == kFloat32 ? 0.0 : 1.0 / 256)).item<double>() <= 1e-5 * scale);
        CHECK(max(abs(db.to(kFloat64) - br.grad())).item<double>() / max(abs(br.grad())).item<double>() < 1e-5);
        if (d == kBFloat16) {  // bfloat16 operands with the float32 sums kept: float32's bound
          Tensor wide = full(want.shape(), 7.0);
          if (nhwc)
            cpu::filter_gradient_gemm_nhwc(g, xs.data_ptr<BFloat16>(), gys.data_ptr<BFloat16>(), wide.data_ptr<float>(),
                                           nullptr);
          else
            cpu::filter_gradient_gemm(g, xs.data_ptr<BFloat16>(), gys.data_ptr<BFloat16>(), wide.data_ptr<float>(),
                                      nullptr);
          CHECK(max(abs(wide.to(kFloat64) - want)).item<double>() <= 1e-5 * scale);
        }
      }
    }
  }
}

TEST_CASE(
    "conv2d's float32 weight gradient where the choice is the GEMM (4x4 images, a 3-channel stem) matches "
    "float64, with and without the input gradient, with a bias") {
  manual_seed(44);
  struct Case {
    int64_t c, side, o;
  };
  for (const Case& k : {Case{32, 4, 32}, Case{3, 12, 16}}) {
    CAPTURE(k.c);
    for (const bool input_grad : {false, true}) {
      const Tensor x64 = randn({4, k.c, k.side, k.side}, kFloat64), w64 = randn({k.o, k.c, 3, 3}, kFloat64);
      const Tensor b64 = randn({k.o}, kFloat64), g64 = randn({4, k.o, k.side, k.side}, kFloat64);
      Tensor x = x64.to(kFloat32).requires_grad_(input_grad), w = w64.to(kFloat32).requires_grad_(),
             b = b64.to(kFloat32).requires_grad_();
      Tensor xr = x64.clone().requires_grad_(input_grad), wr = w64.clone().requires_grad_(),
             br = b64.clone().requires_grad_();
      (conv2d(x, w, b, {1, 1}, {1, 1}) * g64.to(kFloat32)).sum().backward();
      (conv2d(xr, wr, br, {1, 1}, {1, 1}) * g64).sum().backward();
      auto rel = [](const Tensor& got, const Tensor& ref) {
        return max(abs(got.to(kFloat64) - ref)).item<double>() / max(abs(ref)).item<double>();
      };
      CHECK(rel(w.grad(), wr.grad()) < 1e-5);
      CHECK(rel(b.grad(), br.grad()) < 1e-5);
      if (input_grad) CHECK(rel(x.grad(), xr.grad()) < 1e-5);
    }
  }
}

TEST_CASE(
    "conv2d's bfloat16 weight and bias gradients from one chunk (a single sample) and from several, against "
    "float64 on the same values: float32 sums rounded once") {
  // One sample is one chunk whatever the thread count: oneDNN gives its gradient in bfloat16,
  // unblocked from 16x16 blocks straight into the tensor (or, with channel counts off the blocks,
  // reordered); four samples on two threads are two chunks whose float32 sums are added first.
  // Both round once, so each value is within half a bfloat16 step (at most 2^-8 of its size) of
  // float64, plus the float32 sums' own error.
  manual_seed(45);
  struct Case {
    int64_t n, c, o, side;
  };
  // 4x4 images take the bfloat16 GEMM (conv/algorithm.h) when the call is one chunk, and oneDNN's
  // kernel with partial sums when it is several. (Images of 8x8 and more with channels in 16s take
  // bfloat16 Winograd, whose transforms round before the sums: tests/cpu/test_winograd_bf16.cpp.)
  for (const Case& k : {Case{1, 32, 48, 6}, Case{4, 32, 48, 6}, Case{1, 8, 24, 8}, Case{4, 8, 24, 8},
                        Case{1, 32, 48, 4}, Case{4, 32, 48, 4}}) {
    CAPTURE(k.n);
    CAPTURE(k.c);
    CAPTURE(k.side);
    const Tensor x = randn({k.n, k.c, k.side, k.side}).to(kBFloat16), w0 = randn({k.o, k.c, 3, 3}).to(kBFloat16);
    const Tensor b0 = randn({k.o}).to(kBFloat16), g = randn({k.n, k.o, k.side, k.side}).to(kBFloat16);
    Tensor w = w0.clone().requires_grad_(), wr = w0.to(kFloat64).requires_grad_();
    Tensor b = b0.clone().requires_grad_(), br = b0.to(kFloat64).requires_grad_();
    conv2d(x, w, b, {1, 1}, {1, 1}).backward(g);
    conv2d(x.to(kFloat64), wr, br, {1, 1}, {1, 1}).backward(g.to(kFloat64));
    REQUIRE(w.grad().dtype() == kBFloat16);
    for (const auto& [got, want] : {std::pair{w.grad(), wr.grad()}, std::pair{b.grad(), br.grad()}}) {
      const Tensor err = abs(got.to(kFloat64) - want);
      const double scale = max(abs(want)).item<double>();
      CHECK(max(err - abs(want) * (1.0 / 256)).item<double>() <= 1e-5 * scale);
    }
  }
}
