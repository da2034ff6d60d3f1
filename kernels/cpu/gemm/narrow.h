// Products with few rows against a large second operand: [m, k] @ [k, n] with m at most
// kNarrowRows and b a weight of a million values or more (32768 where a 16-bit product would be widened), as in a
// linear layer's forward (x @ W^T) and input gradient (g @ W) at a small batch, or a weight gradient with few outputs
// (g^T @ x for a classifier's last layer). Each value of b then feeds only m multiply-adds, so the product is bound by
// reading b; the library kernels pack b before multiplying it (and the 16-bit paths first widen it into a float32
// copy). This kernel reads b where it lies, in the weight's own storage order, widening float16/bfloat16 values in
// registers, so a 16-bit weight is read at half the bytes of a float32 one (bfloat16 dot products,
// x @ W^T, run on the CPU's bfloat16 dot-product instruction where it has one). The mirror case, a
// large a against at most kNarrowRows columns of b (x @ W^T for a layer with few outputs), runs
// the same kernel on the transposed problem.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// The most rows narrow_gemm takes, and the fewest values of b worth it.
inline constexpr int64_t kNarrowRows = 16;
inline constexpr int64_t kNarrowMinWeights = int64_t{1} << 20;
inline constexpr int64_t kNarrowMinWeightsWidened = int64_t{1} << 15;

// Whether the [m, k] @ [k, n] product with b[p, j] at b + p * sb_row + j * sb_col takes
// narrow_gemm: few rows, a large b, and b stored by rows (sb_col == 1: a weight W read as W in
// g @ W) or by columns (sb_row == 1: W read as W^T in x @ W^T).
// With widens (a 16-bit product whose other paths widen b into a float32 copy first: float16,
// and bfloat16 where the CPU has no bfloat16 units) a smaller b pays: reading it in place then
// saves that pass as well as the packing.
inline bool use_narrow_gemm(int64_t m, int64_t k, int64_t n, int64_t sb_row, int64_t sb_col, bool widens = false) {
  return m > 0 && m <= kNarrowRows && n >= 64 && k >= 16 &&
         k * n >= (widens ? kNarrowMinWeightsWidened : kNarrowMinWeights) && (sb_col == 1 || sb_row == 1);
}

// The same product with the roles swapped: a is the large operand, stored by rows (sa_col == 1),
// and b has at most kNarrowRows columns, as in x @ W^T for a layer with few outputs at a large
// batch (a classifier's last layer). Computed as out^T = b^T @ a^T on the dot path; taken
// where the product would otherwise be widened, and for float32 under use_narrow_float_dots.
inline bool use_narrow_gemm_transposed(int64_t m, int64_t k, int64_t n, int64_t sa_col, bool widens) {
  return widens && sa_col == 1 && use_narrow_gemm(n, k, m, 1, 2, widens);
}

// float32's x @ W^T takes the transposed dot path where W has at most kNarrowFloatCols rows and
// kNarrowFloatMinDepth columns or more: oneDNN's sgemm (and OpenBLAS's) is slow on so few columns,
// while with 16 columns, or k = 256 and less, it was as fast or faster (figures in
// docs/history/PERF-CPU.md, 2026-11-26 17:25).
inline constexpr int64_t kNarrowFloatCols = 12, kNarrowFloatMinDepth = 512;

inline bool use_narrow_float_dots(int64_t m, int64_t k, int64_t n, int64_t sa_col) {
  return n <= kNarrowFloatCols && k >= kNarrowFloatMinDepth && use_narrow_gemm_transposed(m, k, n, sa_col, true);
}

// Whether bfloat16 products here run on the CPU's bfloat16 dot-product instruction (AVX512_BF16,
// unless HG_CPU_ONEDNN=0), each float32 lane adding the products of a pair of k in one step;
// elsewhere they widen to float32 multiply-adds. Either way every element's sum is taken in an order that does not
// depend on the number of threads.
bool narrow_gemm_bf16_dots();

// out (row-major [m, n], contiguous) = a @ b (+ bias[j] on column j, n dense values), with
// a[i, p] at a + i * sa_row + p * sa_col and b[p, j] at b + p * sb_row + j * sb_col, under
// use_narrow_gemm. float32 accumulation, one rounding per element; each element's sum is taken
// in the same order whatever the number of threads. T is float, BFloat16 or Half. Spread over
// the thread pool by columns of the result.
template <class T>
void narrow_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias);

// narrow_gemm under use_narrow_gemm_transposed: out (row-major [m, n], contiguous) = a @ b
// (+ bias[j] on column j), a[i, p] at a + i * sa_row + p, b[p, j] at b + p * sb_row + j * sb_col.
template <class T>
void narrow_gemm_transposed(T* out, const T* a, int64_t sa_row, const T* b, int64_t sb_row, int64_t sb_col, int64_t m,
                            int64_t k, int64_t n, const T* bias);

}  // namespace hg::cpu
