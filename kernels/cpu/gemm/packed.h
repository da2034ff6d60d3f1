// A float32 GEMM whose operands are packed straight from float16/bfloat16 storage: the product
// of the 16-bit dtypes this CPU cannot multiply natively (float16 everywhere; bfloat16 without
// AVX-512 BF16 or AMX) at the speed of a float32 one. Each cache-sized panel of a and b is
// widened while it is packed into the layout the register-blocked kernel reads (transposed in
// registers, 16 x 16 at a time, where the operand is stored the other way), so no float32 copy
// of an operand is ever written whole and nothing is packed twice (a widened copy handed to a
// float32 library GEMM is packed again inside it).
#pragma once

#include <cstdint>

#include "framework/half.h"
#include "kernels/cpu/simd/lanes16.h"

namespace hg::cpu {

// out (row-major [m, n], contiguous) = a @ b (+ bias[j] on column j, n dense values, added to
// the float32 sums before their one rounding), with a[i, p] at a + i * sa_row + p * sa_col and
// b[p, j] at b + p * sb_row + j * sb_col, any strides. float32 accumulation in an order that
// does not depend on the number of threads. T is Half or BFloat16; with Out = float each element
// is rounded to T and stored widened to float32 (and `seen`, when given, set if any is inf or
// NaN). Spread over the thread pool by tiles of the
// result. Built for AVX-512 only (kPackedGemmBuilt); elsewhere the router (route.h) sends these
// products to widening_gemm, and this one throws.
template <class T, class Out = T>
void packed_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias, NonFiniteSeen* seen = nullptr);

#ifdef __AVX512F__
inline constexpr bool kPackedGemmBuilt = true;
#else
inline constexpr bool kPackedGemmBuilt = false;
#endif

}  // namespace hg::cpu
