// The fp8 kernels as dispatch stubs (amp/fp8_ops.cpp runs them; kernels/cpu and kernels/cuda
// fill them in): the fused cast + transpose + amax pass, and the fp8 GEMM (CUDA only). Internal:
// not installed. Neither reads a value back to the host.
#pragma once

#include "framework/dispatch.h"
#include "framework/tensor.h"

namespace hg {

// One pass over x [rows, cols] (contiguous float32, bfloat16 or float16): each element becomes
// code = saturate_fp8(x * scale[0]) (framework/float8.h's cast_to_float8_saturated), written to
// `out` [rows, cols] and to `out_t` [cols, rows] (the transposed copy, for operands that must be
// K-major); either may be undefined, not both. Both, when defined, are contiguous and of one fp8
// dtype. amax[0] = max(amax[0], max |x| over x's non-NaN elements). scale and amax are
// one-element float32 tensors on x's device (amax may be a view into a larger tensor).
using Fp8CastTransposeFn = void (*)(const Tensor& x, const Tensor& scale, const Tensor& out, const Tensor& out_t,
                                    const Tensor& amax);
HG_DECLARE_STUB(fp8_cast_transpose_stub, Fp8CastTransposeFn);

// The fp8 GEMM in its one layout ("TN": both operands K-major, what Hopper's fp8 tensor cores
// take): out[m, n] = d_scale * (a_scale * b_scale * sum_k a[i, k] b[j, k]), float32 accumulation.
// a [m, k] and b [n, k] are contiguous fp8 tensors, not both E5M2; the scales are one-element
// float32 tensors on the device (a_scale and b_scale are the operands' descales, 1/scale);
// d_scale and amax_d only for an fp8 `out` (amax_d[0] set to max |out| before d_scale; either
// may be undefined). out is a contiguous [m, n] tensor: float32, bfloat16, float16 or fp8.
struct Fp8GemmArgs {
  Tensor a, b, a_scale, b_scale, out;
  Tensor d_scale, amax_d;
  bool fast_accum = false;  // cuBLASLt's FAST_ACCUM: partial sums not promoted to float32 as often
};
using Fp8GemmFn = void (*)(const Fp8GemmArgs& args);
HG_DECLARE_STUB(fp8_gemm_stub, Fp8GemmFn);  // optional: CUDA only (the CPU emulates, amp/fp8_ops.h)

// Whether the device can run fp8_gemm_stub (CUDA: compute capability 8.9 or later).
using Fp8GemmSupportedFn = bool (*)(int device);
HG_DECLARE_STUB(fp8_gemm_supported_stub, Fp8GemmSupportedFn);  // optional, with fp8_gemm_stub

}  // namespace hg
