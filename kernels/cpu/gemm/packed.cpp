#include "kernels/cpu/gemm/packed.h"

#ifdef __AVX512F__

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/lanes16.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// The register tile: kMr rows of a (broadcast one value at a time) by kNr columns of b (two
// vectors), 16 accumulators. Panels: up to kKc deep, b's up to kNcMax columns (512 KiB, kept in
// L2), a's up to kMcMax rows (a multiple of 16: a column-major a fills two slivers from each
// 16-value load), read kMr rows at a time, each group from L1 against all of b's panel.
constexpr int64_t kMr = 8, kNv = 2, kNr = kNv * kLanes16;
constexpr int64_t kKc = 256, kMcMax = 1024, kNcMax = 512;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// r[i][j] becomes r[j][i]: unpacks interleave row pairs, shuffles gather 4 rows of each column
// within each 128-bit lane, and two 128-bit lane shuffles put the four lanes of a column together.
// (The masked forms with every lane kept: gcc 12 warns about the unmasked ones' undefined
// pass-through.)
void transpose16(__m512 (&r)[16]) {
  constexpr __mmask16 kAll = 0xffff;
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_ps(kAll, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g .. 4g + 3 of column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Column 4L + c: lane g of it is lane L of u[4g + c].
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_maskz_shuffle_f32x4(kAll, u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v1 = _mm512_maskz_shuffle_f32x4(kAll, u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 v2 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v3 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
    r[c] = _mm512_maskz_shuffle_f32x4(kAll, v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + c] = _mm512_maskz_shuffle_f32x4(kAll, v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + c] = _mm512_maskz_shuffle_f32x4(kAll, v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + c] = _mm512_maskz_shuffle_f32x4(kAll, v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// The 16 runs of up to 16 values at src + l * stride (l < lines, zeros for the others), each
// `count` long along a unit stride, widened and transposed: r[q] holds value q of every run.
template <class T>
void load_transposed(const T* src, int64_t stride, int64_t lines, int64_t count, __m512 (&r)[16]) {
  for (int64_t l = 0; l < kLanes16; ++l) {
    Lanes16 v = {};
    if (l < lines)
      v = count == kLanes16 ? load_lanes16(src + l * stride) : load_lanes16_partial(src + l * stride, count);
    std::memcpy(&r[l], &v, sizeof v);
  }
  transpose16(r);
}

// `count` values at src (unit stride) widened into dst, zeros after them up to `width`.
template <class T>
void widen_padded(const T* src, int64_t count, int64_t width, float* dst) {
  if (count == width && width % kLanes16 == 0) {
    for (int64_t v = 0; v < width; v += kLanes16) {
      const Lanes16 x = load_lanes16(src + v);
      std::memcpy(dst + v, &x, sizeof x);
    }
    return;
  }
  load_run(src, dst, count);
  std::fill(dst + count, dst + width, 0.0f);
}

// a's [rows, kc] panel (a[i, p] at a + i * rs + p * cs) widened to float32, rows past `rows`
// zero up to a multiple of kMr. The kernel broadcasts a's values one at a time, so a is never
// transposed: stored by columns, it is packed in slivers of kMr rows (ap[(s * kc + p) * kMr + r],
// eight contiguous values per p); otherwise widened by rows with row stride ld (ap[i * ld + p]).
// Returns whether the panel is by rows.
template <class T>
bool widen_a(const T* a, int64_t rs, int64_t cs, int64_t rows, int64_t kc, int64_t ld, float* ap) {
  const int64_t slivers = (rows + kMr - 1) / kMr;
  if (rs == 1 && cs != 1) {  // 16 values of a column at a time: eight to each of two slivers
    for (int64_t s = 0; s < slivers; s += 2) {
      const int64_t count = std::min(2 * kMr, rows - s * kMr);
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = a + s * kMr + p * cs;
        const Lanes16 v = count == kLanes16 ? load_lanes16(src) : load_lanes16_partial(src, count);
        __m512 x;
        std::memcpy(&x, &v, sizeof x);
        _mm512_mask_storeu_ps(ap + (s * kc + p) * kMr, 0x00ff, x);
        // Lanes 8-15 to the next sliver (a masked store writes only its lanes).
        if (s + 1 < slivers) _mm512_mask_storeu_ps(ap + ((s + 1) * kc + p) * kMr - kMr, 0xff00, x);
      }
    }
    return false;
  }
  for (int64_t i = 0; i < slivers * kMr; ++i) {
    float* row = ap + i * ld;
    if (i >= rows) {
      std::fill(row, row + kc, 0.0f);
    } else if (cs == 1) {
      load_run(a + i * rs, row, kc);
    } else {
      for (int64_t p = 0; p < kc; ++p) row[p] = static_cast<float>(a[i * rs + p * cs]);
    }
  }
  return true;
}

// b's [kc, cols] panel (b[p, j] at b + p * rs + j * cs) as float32 slivers of kNr columns:
// bp[(s * kc + p) * kNr + c] = b[p, s * kNr + c], zero past `cols`.
template <class T>
void pack_b(const T* b, int64_t rs, int64_t cs, int64_t kc, int64_t cols, float* bp) {
  const int64_t slivers = (cols + kNr - 1) / kNr;
  if (rs == 1 && cs != 1) {  // columns along p (a weight read as W^T): 16 x 16 blocks transposed
    for (int64_t j = 0; j < slivers * kNr; j += kLanes16) {
      const int64_t s = j / kNr, c0 = j % kNr;
      for (int64_t p = 0; p < kc; p += kLanes16) {
        const int64_t count = std::min(kLanes16, kc - p);
        __m512 r[16];
        load_transposed(b + j * cs + p, cs, std::clamp<int64_t>(cols - j, 0, kLanes16), count, r);
        for (int64_t q = 0; q < count; ++q) _mm512_storeu_ps(bp + (s * kc + p + q) * kNr + c0, r[q]);
      }
    }
    return;
  }
  for (int64_t s = 0; s < slivers; ++s) {
    const int64_t count = std::min(kNr, cols - s * kNr);
    for (int64_t p = 0; p < kc; ++p) {
      float* dst = bp + (s * kc + p) * kNr;
      if (cs == 1) {
        widen_padded(b + p * rs + s * kNr, count, kNr, dst);
      } else {
        for (int64_t c = 0; c < kNr; ++c)
          dst[c] = c < count ? static_cast<float>(b[p * rs + (s * kNr + c) * cs]) : 0.0f;
      }
    }
  }
}

// The accumulators of one register tile: acc[r][v] holds row r, columns 16v .. 16v + 15.
using Tile = __m512[kMr][kNv];

// a's kMr rows @ bp's sliver over kc, added to c_in (row stride ldc_in; zeros where it is null),
// handed to sink(acc): a's value (r, p) at ap[r * lda + p] (kByRows) or ap[p * kMr + r] (a
// sliver). In intrinsics with every loop over the tile unrolled and the sink inlined, so the 16
// accumulators stay in registers until they are stored.
template <bool kByRows, class Sink>
[[gnu::always_inline]] inline void micro_tile(const float* ap, int64_t lda, const float* bp, int64_t kc,
                                              const float* c_in, int64_t ldc_in, Sink&& sink) {
  Tile acc;
#pragma GCC unroll 8
  for (int64_t r = 0; r < kMr; ++r)
#pragma GCC unroll 2
    for (int64_t v = 0; v < kNv; ++v)
      acc[r][v] = c_in != nullptr ? _mm512_loadu_ps(c_in + r * ldc_in + v * kLanes16) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m512 bv[kNv];
#pragma GCC unroll 2
    for (int64_t v = 0; v < kNv; ++v) bv[v] = _mm512_loadu_ps(bp + p * kNr + v * kLanes16);
#pragma GCC unroll 8
    for (int64_t r = 0; r < kMr; ++r) {
      const __m512 x = _mm512_set1_ps(kByRows ? ap[r * lda + p] : ap[p * kMr + r]);
#pragma GCC unroll 2
      for (int64_t v = 0; v < kNv; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  sink(acc);
}

// A panel before the last: the sums go to the float32 tile.
struct StoreSums {
  float* c;
  int64_t ldc;
  [[gnu::always_inline]] void operator()(const Tile& acc) const {
#pragma GCC unroll 8
    for (int64_t r = 0; r < kMr; ++r)
#pragma GCC unroll 2
      for (int64_t v = 0; v < kNv; ++v) _mm512_storeu_ps(c + r * ldc + v * kLanes16, acc[r][v]);
  }
};

// The last panel: each sum plus its column's bias, rounded once to T (pack_lanes16 and
// round_lanes16, hg::Half's and hg::BFloat16's rounding), stored to out as T or (Out = float)
// widened back, the first `rows` rows and `cols` columns of the tile only. The same operations
// in the same order as round_rows, so the same bits.
template <class T, class Out>
struct RoundToOut {
  Out* out;
  int64_t ldo, rows, cols;
  const float* bias;    // the tile's first column's, or null
  NonFiniteSeen* seen;  // Out = float: set if a rounded value is inf or NaN (may be null)
  [[gnu::always_inline]] void operator()(const Tile& acc) const {
    int64_t count[kNv];
    Lanes16 bias_v[kNv] = {};
#pragma GCC unroll 2
    for (int64_t v = 0; v < kNv; ++v) {
      count[v] = std::clamp<int64_t>(cols - v * kLanes16, 0, kLanes16);
      if (bias != nullptr) bias_v[v] = load_lanes16_partial(bias + v * kLanes16, count[v]);
    }
#pragma GCC unroll 8
    for (int64_t r = 0; r < kMr; ++r) {
      if (r >= rows) break;
#pragma GCC unroll 2
      for (int64_t v = 0; v < kNv; ++v) {
        Lanes16 sum;
        std::memcpy(&sum, &acc[r][v], sizeof sum);
        if (bias != nullptr) sum += bias_v[v];
        Out* dst = out + r * ldo + v * kLanes16;
        if constexpr (std::is_same_v<Out, float>) {
          const Lanes16 rounded = round_lanes16<T>(sum);
          note_non_finite(seen, rounded);
          store_lanes16_partial(dst, rounded, count[v]);
        } else {
          store_lanes16_partial(dst, sum, count[v]);
        }
      }
    }
  }
};

// How the result is cut into tasks: tiles of at most kMcMax rows and kNcMax columns (b's panel
// then stays in L2 while a's slivers stream past it), split further along the longer side until
// every pool thread has one, but no tile under about 2^20 multiply-adds (a thread's wake-up costs
// more than that). Each task packs its own panels: a is packed once per column tile and b once
// per row tile, so tall products get tall tiles and wide ones wide tiles.
struct Tiling {
  int64_t mc, nc, row_tiles, column_tiles;
};

Tiling tiling(int64_t m, int64_t k, int64_t n) {
  const int64_t wanted = std::clamp<int64_t>(m * k * n >> 20, 1, num_threads());
  int64_t rows = (m + kMcMax - 1) / kMcMax, columns = (n + kNcMax - 1) / kNcMax;
  while (rows * columns < wanted) {
    const bool can_rows = m > rows * 2 * kMr, can_columns = n > columns * kNr;
    if (can_rows && (!can_columns || (m + rows - 1) / rows >= (n + columns - 1) / columns)) {
      ++rows;
    } else if (can_columns) {
      ++columns;
    } else {
      break;
    }
  }
  const int64_t mc = round_up((m + rows - 1) / rows, 2 * kMr), nc = round_up((n + columns - 1) / columns, kNr);
  return {mc, nc, (m + mc - 1) / mc, (n + nc - 1) / nc};
}

}  // namespace

template <class T, class Out>
void packed_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias, NonFiniteSeen* seen) {
  if (m == 0 || n == 0) return;
  Workspace<float> wide_bias(bias != nullptr ? n : 0);
  if (bias != nullptr) load_run(bias, wide_bias.data(), n);
  const float* bias_f = bias != nullptr ? wide_bias.data() : nullptr;
  const Tiling tiles = tiling(m, k, n);  // (named members: clang 14 cannot capture structured bindings)
  const int64_t mc = tiles.mc, nc = tiles.nc, row_tiles = tiles.row_tiles, column_tiles = tiles.column_tiles;
  // k in equal panels of at most kKc (784 as 4 x 196, not 3 x 256 and a thin 16).
  const int64_t panels = std::max<int64_t>(1, (k + kKc - 1) / kKc);
  const int64_t depth = std::max<int64_t>(1, (k + panels - 1) / panels);
  // a's rows 64 bytes longer than the panel: eight rows 1 KiB apart would share cache sets.
  const int64_t lda = depth + kLanes16;
  // Panels before the last add into a float32 tile; the last one's sums are rounded in registers
  // and stored to out, so the tile is never read again.
  const bool tiled_sums = k == 0 || panels > 1;
  parallel_for(row_tiles * column_tiles, 1, [&](int64_t t0, int64_t t1) {
    Workspace<float> ap(mc * lda), bp(nc * depth), tile(tiled_sums ? mc * nc : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / column_tiles * mc, j0 = t % column_tiles * nc;
      const int64_t rows = std::min(mc, m - i0), cols = std::min(nc, n - j0);
      const int64_t row_slivers = (rows + kMr - 1) / kMr, col_slivers = (cols + kNr - 1) / kNr;
      const int64_t ldc = col_slivers * kNr;
      if (k == 0) {
        std::fill(tile.data(), tile.data() + row_slivers * kMr * ldc, 0.0f);
        round_rows<T>(tile.data(), ldc, rows, cols, bias_f != nullptr ? bias_f + j0 : nullptr, out + i0 * n + j0, n,
                      seen);
        continue;
      }
      for (int64_t p0 = 0; p0 < k; p0 += depth) {
        const int64_t kc = std::min(depth, k - p0);
        const bool last = p0 + kc == k;
        const bool by_rows = widen_a(a + i0 * sa_row + p0 * sa_col, sa_row, sa_col, rows, kc, lda, ap.data());
        pack_b(b + p0 * sb_row + j0 * sb_col, sb_row, sb_col, kc, cols, bp.data());
        for (int64_t ir = 0; ir < row_slivers; ++ir) {
          const float* a_rows = ap.data() + ir * kMr * (by_rows ? lda : kc);
          float* c = tile.data() + ir * kMr * ldc;
          for (int64_t jr = 0; jr < col_slivers; ++jr) {
            const float* b_sliver = bp.data() + jr * kc * kNr;
            const float* c_in = p0 > 0 ? c + jr * kNr : nullptr;
            const auto run = [&](auto&& sink) {
              if (by_rows) {
                micro_tile<true>(a_rows, lda, b_sliver, kc, c_in, ldc, sink);
              } else {
                micro_tile<false>(a_rows, lda, b_sliver, kc, c_in, ldc, sink);
              }
            };
            if (!last) {
              run(StoreSums{c + jr * kNr, ldc});
              continue;
            }
            const int64_t i = i0 + ir * kMr, j = j0 + jr * kNr;
            run(RoundToOut<T, Out>{out + i * n + j, n, std::min(kMr, rows - ir * kMr), std::min(kNr, cols - jr * kNr),
                                   bias_f != nullptr ? bias_f + j : nullptr, seen});
          }
        }
      }
    }
  });
}

template void packed_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t, int64_t,
                                int64_t, const Half*, NonFiniteSeen*);
template void packed_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);
template void packed_gemm<Half, float>(float*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                       int64_t, int64_t, const Half*, NonFiniteSeen*);
template void packed_gemm<BFloat16, float>(float*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                           int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);

}  // namespace hg::cpu

#else  // built without AVX-512: the router never picks this path (kPackedGemmBuilt)

#include "framework/error.h"

namespace hg::cpu {

template <class T, class Out>
void packed_gemm(Out*, const T*, int64_t, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, const T*,
                 NonFiniteSeen*) {
  fail("mm", "the packed 16-bit product needs a build with AVX-512 (HG_CPU_GEMM=packed on this build?)");
}

template void packed_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t, int64_t,
                                int64_t, const Half*, NonFiniteSeen*);
template void packed_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);
template void packed_gemm<Half, float>(float*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t,
                                       int64_t, int64_t, const Half*, NonFiniteSeen*);
template void packed_gemm<BFloat16, float>(float*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                           int64_t, int64_t, int64_t, const BFloat16*, NonFiniteSeen*);

}  // namespace hg::cpu

#endif  // __AVX512F__
