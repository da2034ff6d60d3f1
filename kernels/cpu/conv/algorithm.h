// Which algorithm a convolution pass on the CPU runs: direct; Winograd, which computes a 3x3
// stride-1 convolution with fewer multiplications at the cost of a transform of the input, filter
// and output per tile: on float32 primitives oneDNN's F(4x4, 3x3) (jit_wino_4x3, AVX-512; 36
// multiplications per 4x4 output tile instead of 144), for bfloat16 halfgrad's F(2x2, 3x3)
// (conv/winograd_bf16.h; 16 per 2x2 tile instead of 36, padding 1, even images); or, for the weight gradient, one GEMM
// over the im2col columns of a batch of samples (conv/filter_gemm.h). The choice is made here, from the shape and the
// CPU, with the measurement behind each threshold; HG_CPU_CONV=direct|winograd|gemm forces one for A/B runs wherever it
// can take the pass (the usual choice elsewhere).
//
// Accuracy: Winograd's transforms add rounding. Against float64, relative to the largest output,
// ResNet-sized float32 layers measured 1e-6 to 4e-6 on Winograd and 3e-7 direct (tests/cpu/
// test_conv_algorithm.cpp bounds it): far inside 16-bit autocast's rounding and the noise of
// training. bfloat16 Winograd carries about twice the direct kernel's rounding (4e-3 to 5e-3
// against bfloat16's own 2e-3; tests/cpu/test_winograd_bf16.cpp). HG_CPU_CONV=direct gives the
// direct kernel's results everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/cpu/cpu_caps.h"

namespace hg::cpu {

enum class ConvAlgorithm { Direct, Winograd, Gemm };

enum class ConvPass { Forward, InputGradient, WeightGradient };

// A convolution as the algorithm choice sees it: one group's channels, the kernel, the output's
// spatial size, strides and dilations, and whether it runs on float32 primitives (float32 and
// float16 tensors; bfloat16 runs on the CPU's bfloat16 units, where the direct kernels are
// faster than float32 Winograd).
struct ConvShape {
  int64_t in_channels = 0, out_channels = 0, kh = 0, kw = 0, oh = 0, ow = 0, groups = 1;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, padding_h = 0, padding_w = 0;
  bool float32_primitives = true;
};

struct ConvThresholds {
  // Winograd for outputs of at least this many positions per channel. ResNet-18 on 3x32x32
  // (batch 8, one thread, AMD EPYC Zen 4, 2026-11-29, ONEDNN_VERBOSE medians, direct -> Winograd
  // ms): forward 64ch 32x32 9.3 -> 3.0, 128ch 16x16 5.2 -> 2.5, 256ch 8x8 5.2 -> 3.4, but 512ch
  // 4x4 9.0 -> 11.5; input gradient 9.2 -> 2.7, 5.3 -> 2.6, 4.9 -> 3.7, 5.1 -> 11.8.
  // bfloat16 (conv/winograd_bf16.h, all three passes) takes the same threshold: batch 8, one
  // thread, same machine, 2026-11-29, kernel calls timed alone (oneDNN's direct kernel -> Winograd
  // ms, NHWC): forward 64ch 32x32 2.63 -> 1.74, 128ch 16x16 2.45 -> 1.45, 256ch 8x8 2.4 -> 1.49;
  // weight gradient 3.1 -> 1.86, 2.6 -> 1.58, 2.6 -> 1.95-2.38; but 512ch 4x4 forward 2.0 ->
  // 2.03 plus a 1.9 ms filter transform, weight gradient 3.6 -> 4.9.
  int64_t winograd_min_outputs = 64;
  // The weight gradient on the batched GEMM (conv/filter_gemm.h) for outputs of at most this
  // many positions per channel, or products at most gemm_weight_gradient_max_depth deep (input
  // channels x kernel area); oneDNN's direct kernel elsewhere. Backward with only the weight
  // gradient, batch 8, one thread, AMD EPYC Zen 4, 2026-11-29, medians of four alternating runs
  // (direct -> GEMM ms): 512ch 4x4 11.1 -> 8.7, 256->512 stride 2 (4x4 out) 5.5 -> 4.2, a first
  // layer 3->64 32x32 0.82 -> 0.43, 1x1 64->128 stride 2 0.53 -> 0.44; but 64ch 32x32 7.5 -> 9.7,
  // 128ch 16x16 6.2 -> 7.6, 256ch 8x8 7.3 -> 7.3, 128->256 stride 2 3.7 -> 3.6. The GEMM runs at
  // about 105 GFLOP/s on this core, which oneDNN's kernel matches from 8x8 images up.
  // bfloat16 (the whole batch in one GEMM on oneDNN's bfloat16 matmul, conv/filter_gemm.h) takes
  // the outputs rule only, same machine, 2026-11-29, medians of 20 runs, two alternating pairs:
  // 256->512 stride 2 (4x4 out) 2.85-3.54 -> 1.72-1.75, 512ch 4x4 4.10-4.18 -> 4.01-4.12, 1x1
  // 256->512 stride 2 0.22-0.23 -> 0.21-0.22; but the 3-channel stem 0.23-0.28 -> 0.44-0.47,
  // 128->256 stride 2 (8x8 out) 1.87-1.89 -> 1.83-1.84, and 128ch 16x16 2.78 -> 3.80.
  int64_t gemm_weight_gradient_max_outputs = 16;
  int64_t gemm_weight_gradient_max_depth = 64;  // float32 only
};
inline constexpr ConvThresholds kConvThresholds{};

// Whether an algorithm can compute this pass at all. Direct: always. Winograd: 3x3, stride 1, no
// dilation, one group, whole blocks of 16 channels, AVX-512 and oneDNN; on float32 primitives not
// the weight gradient (oneDNN 2.6's Winograd weight-gradient kernel crashed on ResNet-18's
// shapes); for bfloat16 (all three passes) with the CPU's bfloat16 dot product (AVX512_BF16),
// padding 1 and an even output. Gemm: the weight gradient of one group, on float32 primitives or, for bfloat16, where
// the CPU has bfloat16 units and oneDNN (a bfloat16 call of several chunks, which needs partial
// sums, keeps the direct kernel: conv/onednn.cpp).
bool can_take(ConvAlgorithm a, const ConvShape& s, ConvPass pass, const CpuCaps& caps);

// The algorithm for this pass on a CPU with these capabilities, or `forced` where it can take it.
ConvAlgorithm conv_algorithm(const ConvShape& s, ConvPass pass, const CpuCaps& caps,
                             std::optional<ConvAlgorithm> forced = std::nullopt);

// The same on this machine: cpu_caps() and HG_CPU_CONV.
ConvAlgorithm conv_algorithm(const ConvShape& s, ConvPass pass);

// The algorithm named s ("direct", "winograd", "gemm"); throws hg::Error naming HG_CPU_CONV otherwise.
ConvAlgorithm parse_conv_algorithm(std::string_view s);

// HG_CPU_CONV's algorithm, read once; nullopt when unset or empty.
std::optional<ConvAlgorithm> forced_conv_algorithm();

}  // namespace hg::cpu
