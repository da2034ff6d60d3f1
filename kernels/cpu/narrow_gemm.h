// Products with few rows against a large second operand: [m, k] @ [k, n] with m at most
// kNarrowRows and b a weight of a million values or more, as in a linear layer's forward
// (x @ W^T) and input gradient (g @ W) at a small batch. Each value of b then feeds only m
// multiply-adds, so the product is bound by reading b; the library kernels pack b before
// multiplying it (and the 16-bit paths first widen it into a float32 copy). This kernel reads b
// where it lies, in the weight's own storage order, widening float16/bfloat16 values in
// registers, so a 16-bit weight is read at half the bytes of a float32 one.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// The most rows narrow_gemm takes, and the fewest values of b worth it.
inline constexpr int64_t kNarrowRows = 16;
inline constexpr int64_t kNarrowMinWeights = int64_t{1} << 20;

// Whether the [m, k] @ [k, n] product with b[p, j] at b + p * sb_row + j * sb_col takes
// narrow_gemm: few rows, a large b, and b stored by rows (sb_col == 1: a weight W read as W in
// g @ W) or by columns (sb_row == 1: W read as W^T in x @ W^T).
inline bool use_narrow_gemm(int64_t m, int64_t k, int64_t n, int64_t sb_row, int64_t sb_col) {
  return m > 0 && m <= kNarrowRows && n >= 64 && k >= 16 && k * n >= kNarrowMinWeights && (sb_col == 1 || sb_row == 1);
}

// out (row-major [m, n], contiguous) = a @ b (+ bias[j] on column j, n dense values), with
// a[i, p] at a + i * sa_row + p * sa_col and b[p, j] at b + p * sb_row + j * sb_col, under
// use_narrow_gemm. float32 accumulation, one rounding per element; each element's sum is taken
// in the same order whatever the number of threads. T is float, BFloat16 or Half. Spread over
// the thread pool by columns of the result.
template <class T>
void narrow_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias);

}  // namespace hg::cpu
