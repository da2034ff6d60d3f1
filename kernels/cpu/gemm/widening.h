// 16-bit products on float32 arithmetic, for the dtypes this CPU cannot multiply natively
// (float16 everywhere; bfloat16 without AVX-512 BF16 or AMX), where packed_gemm (packed.h, built
// with AVX-512 only) cannot run: the router (route.h) picks between the two. Here, on the float32
// library GEMM, large operands are widened to
// float32 one cache-sized panel at a time, right before the float32 kernel multiplies the panel,
// so they are read from memory once, at half the bytes of float32 ones, and never copied whole;
// the float32 partial products stay in a per-task tile and are rounded once into the result.
// Small operands (they stay in cache) are widened whole and multiplied by one float32 call.
#pragma once

#include <cstdint>

#include "framework/half.h"
#include "kernels/cpu/simd/lanes16.h"

namespace hg::cpu {

// out (row-major [m, n], contiguous) = a @ b, with a[i, p] at a + i * sa_row + p * sa_col and
// b[p, j] at b + p * sb_row + j * sb_col; float32 accumulation, one rounding per element. T is
// Half or BFloat16. With bias (n dense values), out = a @ b + bias, the bias added to the float32
// sums before their one rounding. The work is spread over the thread pool.
// With Out = float, each element is rounded to T and stored widened to float32, and `seen`
// (when given) is set if any is inf or NaN.
template <class T, class Out = T>
void widening_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                   int64_t m, int64_t k, int64_t n, const T* bias = nullptr, NonFiniteSeen* seen = nullptr);

// How a float32 GEMM reads a matrix copied by widen_matrix.
struct WidenedMatrix {
  bool transposed = false;
  int64_t ld = 0;
};

// Copies the [rows, cols] matrix whose element (i, j) is at src + i * rs + j * cs into dst as
// float32, dense, over the thread pool. The copy keeps the matrix's storage order: one stored
// column by column (a weight seen through .t()) is copied that way and read transposed, so the
// copy reads memory in order. T is Half, BFloat16 or float (a strided float32 operand made
// dense for BLAS).
template <class T>
WidenedMatrix widen_matrix(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst);

}  // namespace hg::cpu
