// 16-bit products on the float32 GEMM kernels, for the dtypes this CPU cannot multiply natively
// (float16 everywhere; bfloat16 without AVX-512 BF16 or AMX): the operands are widened to
// float32 one cache-sized panel at a time, right before the float32 kernel multiplies the panel,
// so the 16-bit operands are read from memory once, at half the bytes of float32 ones, and no
// whole-matrix float32 copy is ever made. The float32 partial products stay in a per-task tile
// and are rounded once into the result.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// out (row-major [m, n], contiguous) = a @ b, with a[i, p] at a + i * sa_row + p * sa_col and
// b[p, j] at b + p * sb_row + j * sb_col; float32 accumulation, one rounding per element. T is
// Half or BFloat16. With bias (n values, bias_stride apart), out = a @ b + bias, the bias added
// to the float32 sums before their one rounding. Tiles of the result are spread over the thread
// pool.
template <class T>
void widening_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                   int64_t m, int64_t k, int64_t n, const T* bias = nullptr, int64_t bias_stride = 1);

}  // namespace hg::cpu
