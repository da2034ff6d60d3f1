#include "kernels/cpu/conv/algorithm.h"

#include <cstdlib>

#include "framework/error.h"

namespace hg::cpu {

bool can_take(ConvAlgorithm a, const ConvShape& s, ConvPass pass, const CpuCaps& caps) {
  switch (a) {
    case ConvAlgorithm::Direct: return true;
    case ConvAlgorithm::Winograd: {
      const bool winograd_3x3 = caps.avx512 && caps.onednn && s.kh == 3 && s.kw == 3 && s.stride_h == 1 &&
                                s.stride_w == 1 && s.dilation_h == 1 && s.dilation_w == 1 && s.groups == 1 &&
                                s.in_channels % 16 == 0 && s.out_channels % 16 == 0;
      if (s.float32_primitives) return winograd_3x3 && pass != ConvPass::WeightGradient;
      return winograd_3x3 && caps.avx512_bf16 && caps.native_bf16() && s.padding_h == 1 && s.padding_w == 1 &&
             s.oh % 2 == 0 && s.ow % 2 == 0;
    }
    case ConvAlgorithm::Gemm:
      return pass == ConvPass::WeightGradient && s.groups == 1 &&
             (s.float32_primitives || (caps.onednn && caps.native_bf16()));
  }
  return false;
}

ConvAlgorithm conv_algorithm(const ConvShape& s, ConvPass pass, const CpuCaps& caps,
                             std::optional<ConvAlgorithm> forced) {
  if (forced && can_take(*forced, s, pass, caps)) return *forced;
  const int64_t outputs = s.oh * s.ow;
  if (pass == ConvPass::WeightGradient) {
    if (!s.float32_primitives && can_take(ConvAlgorithm::Winograd, s, pass, caps) &&
        outputs >= kConvThresholds.winograd_min_outputs)
      return ConvAlgorithm::Winograd;
    const bool small = outputs <= kConvThresholds.gemm_weight_gradient_max_outputs;
    const bool shallow = s.in_channels * s.kh * s.kw <= kConvThresholds.gemm_weight_gradient_max_depth;
    return can_take(ConvAlgorithm::Gemm, s, pass, caps) && (small || (shallow && s.float32_primitives))
               ? ConvAlgorithm::Gemm
               : ConvAlgorithm::Direct;
  }
  return can_take(ConvAlgorithm::Winograd, s, pass, caps) && outputs >= kConvThresholds.winograd_min_outputs
             ? ConvAlgorithm::Winograd
             : ConvAlgorithm::Direct;
}

ConvAlgorithm conv_algorithm(const ConvShape& s, ConvPass pass) {
  return conv_algorithm(s, pass, cpu_caps(), forced_conv_algorithm());
}

ConvAlgorithm parse_conv_algorithm(std::string_view s) {
  if (s == "direct") return ConvAlgorithm::Direct;
  if (s == "winograd") return ConvAlgorithm::Winograd;
  if (s == "gemm") return ConvAlgorithm::Gemm;
  fail("conv2d",
       "HG_CPU_CONV='{}' names no convolution algorithm; valid names: direct, winograd, gemm (or unset for the usual "
       "choice)",
       s);
}

std::optional<ConvAlgorithm> forced_conv_algorithm() {
  static const std::optional<ConvAlgorithm> forced = []() -> std::optional<ConvAlgorithm> {
    const char* env = std::getenv("HG_CPU_CONV");
    if (env == nullptr || *env == '\0') return std::nullopt;
    return parse_conv_algorithm(env);
  }();
  return forced;
}

}  // namespace hg::cpu
