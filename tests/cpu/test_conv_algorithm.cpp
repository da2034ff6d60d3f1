// The convolution algorithm choice (kernels/cpu/conv/algorithm.h) as a table over shapes and
// CPUs, HG_CPU_CONV's parsing, and Winograd's accuracy on this machine where it runs.
#include <cmath>

#include "helpers.h"
#include "kernels/cpu/conv/algorithm.h"

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
  return s;
}

}  // namespace

TEST_CASE("conv algorithm: Winograd for 3x3 stride-1 float32 layers of 8x8 outputs and more, else direct") {
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
      {bf16, ConvPass::Forward, ConvAlgorithm::Direct},
      {k1, ConvPass::Forward, ConvAlgorithm::Direct},
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
}

TEST_CASE("HG_CPU_CONV names the algorithms; anything else is an error naming the valid ones") {
  CHECK(cpu::parse_conv_algorithm("direct") == ConvAlgorithm::Direct);
  CHECK(cpu::parse_conv_algorithm("winograd") == ConvAlgorithm::Winograd);
  hg::test::check_error([] { cpu::parse_conv_algorithm("fft"); },
                        {"[conv2d]", "HG_CPU_CONV='fft'", "direct, winograd"});
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
