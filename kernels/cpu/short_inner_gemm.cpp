#include "kernels/cpu/short_inner_gemm.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/lanes16.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

using V16 = Lanes16;
constexpr int64_t kLanes = kLanes16;
constexpr int64_t kRows = 8;  // output rows per block: each b vector loaded feeds 8 FMAs

// Output rows [i0, i0 + rows) (rows <= kRows): af holds them as float32 [kRows, k] (zeros past
// `rows`), panels is b as float32 in [k, 16] panels of 16 columns, each read as one contiguous
// block (the last one zero-padded).
template <class T>
void row_block(T* out, const float* af, const float* panels, int64_t rows, int64_t k, int64_t n) {
  for (int64_t j = 0; j < n; j += kLanes) {
    const float* panel = panels + j * k;
    V16 acc[kRows] = {};
    for (int64_t p = 0; p < k; ++p) {
      V16 bv;
      std::memcpy(&bv, panel + p * kLanes, sizeof bv);
      for (int64_t r = 0; r < kRows; ++r) acc[r] += af[r * k + p] * bv;
    }
    // Rounded in registers, straight from the accumulators (a constant trip count, so acc
    // stays in registers).
    if (j + kLanes <= n) {
      for (int64_t r = 0; r < kRows; ++r)
        if (r < rows) store_lanes16(out + r * n + j, acc[r]);
    } else {  // the last n % 16 columns
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; r < rows && j + c < n; ++c) out[r * n + j + c] = static_cast<T>(acc[r][c]);
    }
  }
}

}  // namespace

template <class T>
void short_inner_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                      int64_t m, int64_t k, int64_t n) {
  // b as float32 panels of 16 columns, [k, 16] each, shared by every block.
  const int64_t panel_count = (n + kLanes - 1) / kLanes;
  Workspace<float> panels(panel_count * k * kLanes);
  parallel_for(panel_count, 16, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t j0 = q * kLanes, cols = std::min(kLanes, n - j0);
      float* panel = panels.data() + q * k * kLanes;
      for (int64_t p = 0; p < k; ++p) {
        const T* row = b + p * sb_row + j0 * sb_col;
        float* dst = panel + p * kLanes;
        if (sb_col == 1) {
          load_run(row, dst, cols);
        } else {
          for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<float>(row[c * sb_col]);
        }
        std::fill(dst + cols, dst + kLanes, 0.0f);
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
      row_block(out + i0 * n, af, panels.data(), rows, k, n);
    }
  });
}

template void short_inner_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t);
template void short_inner_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                     int64_t, int64_t);

}  // namespace hg::cpu
