// 16-bit products with a short inner dimension (k <= 32: route.h picks this path), such as a weight gradient g^T x at a
// small batch: [m, k] @ [k, n] with a large [m, n] result. They are bound by writing the
// result, and the library kernels spend several times that on them (oneDNN's bf16 kernels
// repack per block, the float16 path goes through a float32 result); this one widens both small
// operands to float32 once and writes each output block rounded, from registers.
#pragma once

#include <cstdint>

#include "framework/half.h"
#include "kernels/cpu/simd/lanes16.h"

namespace hg::cpu {

// out (row-major [m, n], contiguous) = a @ b, with a[i, p] at a + i * sa_row + p * sa_col and
// b[p, j] at b + p * sb_row + j * sb_col; float32 accumulation, one rounding per element. T is
// BFloat16 or Half. Spread over the thread pool by row blocks.
// With Out = float, each element is rounded to T and stored widened to float32 (what
// converting the T result to float32 gives, in the same pass), and `seen` (when given) is set
// if any of them is inf or NaN.
template <class T, class Out = T>
void short_inner_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                      int64_t m, int64_t k, int64_t n, NonFiniteSeen* seen = nullptr);

}  // namespace hg::cpu
