// Products with few rows against a large second operand: [m, k] @ [k, n] with m at most 16 and
// b a weight of a million values or more (32768 where a 16-bit product would be widened; the
// router, route.h, holds these thresholds and picks this path), as in a
// linear layer's forward (x @ W^T) and input gradient (g @ W) at a small batch, or a weight gradient with few outputs
// (g^T @ x for a classifier's last layer). Each value of b then feeds only m multiply-adds, so the product is bound by
// reading b; the library kernels pack b before multiplying it (and the 16-bit paths first widen it into a float32
// copy). This kernel reads b where it lies, in the weight's own storage order, widening float16/bfloat16 values in
// registers, so a 16-bit weight is read at half the bytes of a float32 one (bfloat16 dot products,
// x @ W^T, run on the CPU's bfloat16 dot-product instruction where it has one). The mirror case, a
// large a against at most 16 columns of b (x @ W^T for a layer with few outputs), runs
// the same kernel on the transposed problem.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// out (row-major [m, n], contiguous) = a @ b (+ bias[j] on column j, n dense values), with
// a[i, p] at a + i * sa_row + p * sa_col and b[p, j] at b + p * sb_row + j * sb_col, under
// GemmPath::Narrow. float32 accumulation, one rounding per element; each element's sum is taken
// in the same order whatever the number of threads. T is float, BFloat16 or Half. Spread over
// the thread pool by columns of the result.
template <class T>
void narrow_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias);

// narrow_gemm for GemmPath::NarrowTransposed: out (row-major [m, n], contiguous) = a @ b
// (+ bias[j] on column j), a[i, p] at a + i * sa_row + p, b[p, j] at b + p * sb_row + j * sb_col.
template <class T>
void narrow_gemm_transposed(T* out, const T* a, int64_t sa_row, const T* b, int64_t sb_row, int64_t sb_col, int64_t m,
                            int64_t k, int64_t n, const T* bias);

}  // namespace hg::cpu
