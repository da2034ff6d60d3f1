#include "kernels/cpu/gemm/widening.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// Panel sizes: a [kMc, kKc] panel of a, a [kKc, nc] panel of b and the [kMc, nc] float32 tile
// of the result take 1.25 MiB at most, inside one core's L2 on current server CPUs; a deep
// panel keeps the float32 kernel's passes over the tile few.
constexpr int64_t kMc = 256, kKc = 512, kNcMax = 256, kNcMin = 64;

// Whether a matrix with these strides is stored column by column (and so copied that way).
bool stored_by_columns(int64_t rs, int64_t cs) { return rs == 1 && cs != 1; }

// Widens the [rows, cols] block whose element (i, j) is at src + i * rs + j * cs into dst, in
// the block's own storage order (see widen_matrix), on the calling thread.
template <class T>
WidenedMatrix widen_panel(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  if (stored_by_columns(rs, cs)) {
    for (int64_t j = 0; j < cols; ++j) load_run(src + j * cs, dst + j * rows, rows);
    return {true, rows};
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (cs == 1) {
      load_run(src + i * rs, dst + i * cols, cols);
    } else {
      for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<float>(src[i * rs + j * cs]);
    }
  }
  return {false, cols};
}

// The result's column-tile width: as wide as kNcMax allows while there are tiles enough for
// every pool thread.
int64_t column_tile(int64_t m, int64_t n) {
  const int64_t row_tiles = (m + kMc - 1) / kMc;
  const int64_t wanted_column_tiles = std::max<int64_t>(1, (num_threads() + row_tiles - 1) / row_tiles);
  const int64_t nc = (n + wanted_column_tiles - 1) / wanted_column_tiles;
  return std::clamp<int64_t>((nc + 15) / 16 * 16, kNcMin, kNcMax);
}

}  // namespace

template <class T>
WidenedMatrix widen_matrix(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  const bool by_columns = stored_by_columns(rs, cs);
  const int64_t lines = by_columns ? cols : rows, length = by_columns ? rows : cols;
  parallel_for(lines, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(length, 1)), [&](int64_t b, int64_t e) {
    if (by_columns) {
      widen_panel(src + b * cs, rows, e - b, rs, cs, dst + b * rows);
    } else {
      widen_panel(src + b * rs, e - b, cols, rs, cs, dst + b * cols);
    }
  });
  return by_columns ? WidenedMatrix{true, rows} : WidenedMatrix{false, cols};
}

template <class T, class Out>
void widening_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                   int64_t m, int64_t k, int64_t n, const T* bias, NonFiniteSeen* seen) {
  Workspace<float> wide_bias(bias != nullptr ? n : 0);
  if (bias != nullptr) load_run(bias, wide_bias.data(), n);
  const float* bias_f = bias != nullptr ? wide_bias.data() : nullptr;
  if (m * k + k * n <= kGemmThresholds.widening_whole_operands) {  // small: they stay in cache
    Workspace<float> wa(m * k), wb(k * n), wc(m * n);
    const WidenedMatrix pa = widen_matrix(a, m, k, sa_row, sa_col, wa.data());
    const WidenedMatrix pb = widen_matrix(b, k, n, sb_row, sb_col, wb.data());
    gemm(pa.transposed, pb.transposed, m, n, k, wa.data(), pa.ld, wb.data(), pb.ld, wc.data(), n, false);
    parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      round_rows<T>(wc.data() + r0 * n, n, r1 - r0, n, bias_f, out + r0 * n, n, seen);
    });
    return;
  }
  const int64_t nc = column_tile(m, n);
  const int64_t row_tiles = (m + kMc - 1) / kMc, column_tiles = (n + nc - 1) / nc;
  parallel_for(row_tiles * column_tiles, 1, [&](int64_t t0, int64_t t1) {
    Workspace<float> ap(std::min(m, kMc) * std::min(k, kKc)), bp(std::min(k, kKc) * nc), tile(std::min(m, kMc) * nc);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / column_tiles * kMc, j0 = t % column_tiles * nc;
      const int64_t rows = std::min(kMc, m - i0), cols = std::min(nc, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t depth = std::min(kKc, k - p0);
        const WidenedMatrix pa = widen_panel(a + i0 * sa_row + p0 * sa_col, rows, depth, sa_row, sa_col, ap.data());
        const WidenedMatrix pb = widen_panel(b + p0 * sb_row + j0 * sb_col, depth, cols, sb_row, sb_col, bp.data());
        gemm(pa.transposed, pb.transposed, rows, cols, depth, ap.data(), pa.ld, bp.data(), pb.ld, tile.data(), cols,
             p0 > 0);
      }
      round_rows<T>(tile.data(), cols, rows, cols, bias_f != nullptr ? bias_f + j0 : nullptr, out + i0 * n + j0, n,
                    seen);
    }
  });
}

template void widening_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t, int64_t,
                                  int64_t, const Half*, NonFiniteSeen*);
template void widening_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                      int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);
template void widening_gemm<Half, float>(float*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                         int64_t, int64_t, const Half*, NonFiniteSeen*);
template void widening_gemm<BFloat16, float>(float*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t,
                                             int64_t, int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);
template WidenedMatrix widen_matrix<float>(const float*, int64_t, int64_t, int64_t, int64_t, float*);
template WidenedMatrix widen_matrix<Half>(const Half*, int64_t, int64_t, int64_t, int64_t, float*);
template WidenedMatrix widen_matrix<BFloat16>(const BFloat16*, int64_t, int64_t, int64_t, int64_t, float*);

}  // namespace hg::cpu
