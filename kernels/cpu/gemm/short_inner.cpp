#include "kernels/cpu/gemm/short_inner.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/lanes16.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// Output rows per block and column vectors per step: each of the kVecs b vectors loaded feeds
// kRows FMAs, and each broadcast value of a feeds kVecs, so a step's 16 FMAs wait on 8 loads
// (eight rows by one vector waited on nine loads for eight FMAs, and ran at half the FMA rate).
constexpr int64_t kRows = 6, kVecs = 4;

// Columns [j, j + 16 * C) of output rows [0, rows): af holds the rows as float32 [kRows, k]
// (zeros past `rows`), panels is b as float32 in [k, 16] panels of 16 columns, each read as one
// contiguous block (the last one zero-padded).
template <int64_t C, class T, class Out>
void column_step(Out* out, const float* af, const float* panels, int64_t rows, int64_t k, int64_t n, int64_t j,
                 NonFiniteSeen* seen) {
  Lanes16 acc[kRows][C] = {};
  for (int64_t p = 0; p < k; ++p) {
    Lanes16 bv[C];
    for (int64_t c = 0; c < C; ++c)
      std::memcpy(&bv[c], panels + (j + c * kLanes16) * k + p * kLanes16, sizeof(Lanes16));
    for (int64_t r = 0; r < kRows; ++r) {
      const float s = af[r * k + p];
      for (int64_t c = 0; c < C; ++c) acc[r][c] += s * bv[c];
    }
  }
  // Rounded in registers, straight from the accumulators (constant trip counts, so acc stays
  // in registers).
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t j0 = j + c * kLanes16;
      if (r >= rows) continue;
      if (j0 + kLanes16 <= n) {
        if constexpr (std::is_same_v<Out, T>) {
          store_lanes16(out + r * n + j0, acc[r][c]);
        } else {
          const Lanes16 rounded = round_lanes16<T>(acc[r][c]);
          note_non_finite(seen, rounded);
          std::memcpy(out + r * n + j0, &rounded, sizeof rounded);
        }
      } else {  // the last n % 16 columns
        for (int64_t l = 0; j0 + l < n; ++l) {
          out[r * n + j0 + l] = static_cast<Out>(static_cast<T>(acc[r][c][l]));
          if constexpr (std::is_same_v<Out, float>) note_non_finite(seen, out[r * n + j0 + l]);
        }
      }
    }
  }
}

template <class T, class Out>
void row_block(Out* out, const float* af, const float* panels, int64_t rows, int64_t k, int64_t n,
               NonFiniteSeen* seen) {
  int64_t j = 0;
  for (; j + kVecs * kLanes16 <= n; j += kVecs * kLanes16) column_step<kVecs, T>(out, af, panels, rows, k, n, j, seen);
  for (; j < n; j += kLanes16) column_step<1, T>(out, af, panels, rows, k, n, j, seen);
}

}  // namespace

template <class T, class Out>
void short_inner_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                      int64_t m, int64_t k, int64_t n, NonFiniteSeen* seen) {
  // b as float32 panels of 16 columns, [k, 16] each, shared by every block.
  const int64_t panel_count = (n + kLanes16 - 1) / kLanes16;
  Workspace<float> panels(panel_count * k * kLanes16);
  parallel_for(panel_count, 16, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t j0 = q * kLanes16, cols = std::min(kLanes16, n - j0);
      float* panel = panels.data() + q * k * kLanes16;
      for (int64_t p = 0; p < k; ++p) {
        const T* row = b + p * sb_row + j0 * sb_col;
        float* dst = panel + p * kLanes16;
        if (sb_col == 1) {
          load_run(row, dst, cols);
        } else {
          for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<float>(row[c * sb_col]);
        }
        std::fill(dst + cols, dst + kLanes16, 0.0f);
      }
    }
  });
  const int64_t blocks = (m + kRows - 1) / kRows;
  // At least 2^16 multiply-adds per thread: [128,10] @ [10,784] (a classifier's input gradient)
  // is 22 blocks of 47k and runs on both threads, 26 -> 19 us in float16 (a grain counted in
  // outputs kept it on one).
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, kRows * n * k));
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    alignas(64) float af[kRows * kGemmThresholds.short_inner_depth];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kRows, rows = std::min(kRows, m - i0);
      std::fill(af, af + kRows * k, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t p = 0; p < k; ++p) af[r * k + p] = static_cast<float>(a[(i0 + r) * sa_row + p * sa_col]);
      row_block<T>(out + i0 * n, af, panels.data(), rows, k, n, seen);
    }
  });
}

template void short_inner_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t, NonFiniteSeen*);
template void short_inner_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                     int64_t, int64_t, NonFiniteSeen*);
template void short_inner_gemm<BFloat16, float>(float*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t,
                                                int64_t, int64_t, int64_t, int64_t, NonFiniteSeen*);
template void short_inner_gemm<Half, float>(float*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t,
                                            int64_t, int64_t, int64_t, NonFiniteSeen*);

}  // namespace hg::cpu
