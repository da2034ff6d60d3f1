// Fp8Autocast: an fp8 region (docs/AMP.md, "fp8"). Inside it, linear and mm whose three GEMM
// dimensions are multiples of 16 run as fp8 GEMMs: their inputs cast to E4M3 with the recipe's
// scales (the casts' amaxes recorded in its history), multiplied with float32 accumulation,
// descaled, output in bfloat16; their backward casts the output's gradient to E5M2 (Hybrid) and
// multiplies in fp8 again. Every other op runs as in a bfloat16 AutocastGuard region, and so do
// linear and mm with other shapes or on a GPU without fp8 GEMMs (each such fallback is an
// "fp8_fallback" event in the op recorder and counts in Fp8Recipe::fallbacks()).
//
//   amp::Fp8Recipe recipe;                  // amp/fp8_recipe.h: delayed scaling, on the device
//   for (...) {
//     Tensor loss;
//     {
//       amp::Fp8Autocast fp8(kCPU, recipe); // updates the scales from last step's amaxes
//       loss = cross_entropy(model(x), y);
//     }
//     loss.backward();                      // gradients cast to E5M2 with the recipe's scales
//     opt.step();
//   }
//
// On CUDA with compute capability 8.9 or later the GEMMs are cuBLASLt's fp8 GEMMs (amp/fp8_ops.h;
// written for Hopper, not yet run on a GPU); a GPU below 8.9 runs linear and mm in bfloat16,
// counted as fallbacks. On the CPU the fp8 GEMM is emulated: the same fused casts and scales, the
// fp8 operands widened to float32 and multiplied by the float32 GEMM, so the result differs from
// a device fp8 GEMM only in the order of accumulation.
#pragma once

#include <memory>
#include <optional>

#include "amp/autocast_scope.h"
#include "amp/fp8_recipe.h"

namespace hg::amp {

class [[nodiscard]] Fp8Autocast {
 public:
  // `enabled` false: fp8 is off inside (nested regions too) and autocast is left as it is.
  Fp8Autocast(DeviceType device, const Fp8Recipe& recipe, bool enabled = true);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;
  // Whether linear and mm on `device` run in fp8 inside this region now (autocast may have been
  // turned off by an inner AutocastGuard).
  bool fp8_on(DeviceType device) const;

 private:
  // The fp8 GEMM for linear (a, w, bias) or mm (a, w) when this region takes it, else undefined.
  friend Tensor route_fp8_gemm(const Fp8Autocast& region, bool linear, const TensorList& inputs);
  DeviceType device_;
  std::shared_ptr<detail::Fp8RecipeState> state_;  // null when the region was entered disabled
  const Fp8Autocast* outer_;                       // the region this one nests in
  std::optional<AutocastGuard> bf16_;
};

// Whether linear and mm on `device` would run in fp8 on this thread now (shapes permitting).
bool is_fp8_autocast_enabled(DeviceType device);

// The recipe's cast: x * scale (in float32) rounded to nearest even and saturated to the format's
// largest finite value (Float8E4M3::from_float_saturate); NaN stays NaN. `scale` is a float32
// tensor of one element on x's device; `fp8` is kFloat8E4M3 or kFloat8E5M2.
Tensor fp8_scaled_cast(const Tensor& x, const Tensor& scale, Dtype fp8);

}  // namespace hg::amp
