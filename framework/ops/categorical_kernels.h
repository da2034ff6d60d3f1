// Kernel plumbing behind categorical.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/categorical.h"

namespace hg {

// out [rows, s] (int64) from probs [rows, n] (floating, checked non-negative with positive row
// sums) and float64 uniforms in [0, 1), all contiguous. With replacement, uniforms is [rows, s]
// and sample j is the first class whose running sum (float64, in class order) exceeds u[j] times
// the row's total. Without, uniforms is [rows, n] and the samples are the s classes with the
// largest keys log(1 - u[i]) / p[i] (p[i] > 0; ties to the lower index), largest first
// (Efraimidis-Spirakis: the same distribution as drawing one class at a time). Both devices
// compute the same samples from the same uniforms.
using MultinomialFn = void (*)(const Tensor& out, const Tensor& probs, const Tensor& uniforms, bool replacement);
HG_DECLARE_STUB(multinomial_stub, MultinomialFn);

}  // namespace hg
