// The two steps of an fp8 GEMM (docs/AMP.md, "fp8"), callable on their own: the fused cast of an
// operand (scaled, saturated, optionally transposed, its amax recorded, in one pass) and the GEMM
// of two K-major fp8 operands, on CUDA by cuBLASLt (compute capability 8.9+) and everywhere by the
// emulation (fp8 widened to float32, the float32 GEMM), which is the reference for the device.
#pragma once

#include "framework/tensor.h"

namespace hg::amp {

// An fp8 copy of a [rows, cols] tensor: `data` in its layout, `data_t` [cols, rows] transposed
// (contiguous); each is defined when asked for.
struct Fp8Operand {
  Tensor data;
  Tensor data_t;
};

// The recipe's cast of a 2-d x (float32, bfloat16 or float16; others go through float32) to `fp8`
// with `scale` (one float32 value on x's device): codes bit for bit fp8_scaled_cast's, in x's
// layout (`rowwise`) and/or transposed (`columnwise`), and amax[0] = max(amax[0], max |x| over
// the non-NaN elements) in the same pass (amax: one float32 element on x's device, written in
// place, may be a view). No host synchronisation. Not differentiable.
Fp8Operand fp8_cast_transpose(const Tensor& x, const Tensor& scale, Dtype fp8, const Tensor& amax, bool rowwise = true,
                              bool columnwise = false);

// out [m, n] = (a [m, k] . b [n, k]^T) * a_descale * b_descale, float32 accumulation, rounded once
// to `out` (float32, bfloat16 or float16): both operands K-major fp8 (not both E5M2) on one device,
// the descales one float32 value each there. On CUDA the device GEMM (fp8_gemm_available), which
// wants a and b contiguous; elsewhere fp8_gemm_emulated. Not differentiable.
Tensor fp8_gemm(const Tensor& a, const Tensor& b, const Tensor& a_descale, const Tensor& b_descale, Dtype out,
                bool fast_accum = false);
// The same product on any device: a and b widened to float32 (exactly) and multiplied by the
// float32 GEMM, times a_descale * b_descale. The device GEMM differs from it only in the order of
// accumulation (and, with fast_accum, in how often partial sums are promoted).
Tensor fp8_gemm_emulated(const Tensor& a, const Tensor& b, const Tensor& a_descale, const Tensor& b_descale, Dtype out);

// Whether fp8_gemm runs on the device's own fp8 GEMM: CUDA with compute capability 8.9 or later.
bool fp8_gemm_available(Device device);

}  // namespace hg::amp
