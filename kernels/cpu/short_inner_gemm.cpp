#include "kernels/cpu/short_inner_gemm.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// 16 float lanes (one AVX-512 register; two AVX ones elsewhere), written with GCC's vector
// extension so the accumulators below stay in registers.
using V16 = float __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kRows = 8;  // output rows per block: each b vector loaded feeds 8 FMAs

// Output rows [i0, i0 + rows) (rows <= kRows): af holds them as float32 [rows, k], bf is b as
// float32 [k, n].
template <class T>
void row_block(T* out, const float* af, const float* bf, int64_t rows, int64_t k, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    V16 acc[kRows] = {};
    for (int64_t p = 0; p < k; ++p) {
      V16 bv;
      std::memcpy(&bv, bf + p * n + j, sizeof bv);
      for (int64_t r = 0; r < kRows; ++r) acc[r] += af[r * k + p] * bv;  // rows past `rows` are zeros
    }
    // Rounded straight from the accumulators (a copy through a second buffer split each
    // 64-byte store in two and stalled the wide load that followed on store forwarding).
    for (int64_t r = 0; r < rows; ++r) store_run(reinterpret_cast<const float*>(&acc[r]), out + r * n + j, kLanes);
  }
  for (; j < n; ++j) {  // the last n % 16 columns
    for (int64_t r = 0; r < rows; ++r) {
      float s = 0;
      for (int64_t p = 0; p < k; ++p) s += af[r * k + p] * bf[p * n + j];
      out[r * n + j] = static_cast<T>(s);
    }
  }
}

}  // namespace

template <class T>
void short_inner_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                      int64_t m, int64_t k, int64_t n) {
  // b as float32 [k, n], shared by every block.
  Workspace<float> bf(k * n);
  parallel_for(k, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* row = b + p * sb_row;
      float* dst = bf.data() + p * n;
      if (sb_col == 1) {
        load_run(row, dst, n);
      } else {
        for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(row[j * sb_col]);
      }
    }
  });
  const int64_t blocks = (m + kRows - 1) / kRows;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, kRows * n / 4));
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    alignas(64) float af[kRows * kShortInner];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kRows, rows = std::min(kRows, m - i0);
      std::fill(af, af + kRows * k, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t p = 0; p < k; ++p) af[r * k + p] = static_cast<float>(a[(i0 + r) * sa_row + p * sa_col]);
      row_block(out + i0 * n, af, bf.data(), rows, k, n);
    }
  });
}

template void short_inner_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t);
template void short_inner_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                     int64_t, int64_t);

}  // namespace hg::cpu
