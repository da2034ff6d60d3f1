#include "kernels/cpu/gemm/narrow.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "framework/error.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/lanes16.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// a as float32, [m, ld] with ld a multiple of 16 and zeros past column k, so the kernels read
// whole vectors without bounds checks.
template <class T>
void widen_rows(const T* a, int64_t sa_row, int64_t sa_col, int64_t m, int64_t k, int64_t ld, float* dst) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = dst + i * ld;
    if (sa_col == 1) {
      load_run(a + i * sa_row, row, k);
    } else {
      for (int64_t p = 0; p < k; ++p) row[p] = static_cast<float>(a[i * sa_row + p * sa_col]);
    }
    std::fill(row + k, row + ld, 0.0f);
  }
}

// Whether x @ W^T reads T in pairs (load_bf16_pairs): bfloat16, whose widening then costs half.
template <class T>
constexpr bool kPaired = std::is_same_v<T, BFloat16>;
constexpr int64_t kPair = 2 * kLanes16;

// a as float32 for the paired dot products: [m, ld] with ld a multiple of 32, each block of 32
// columns stored as its 16 even columns, then its 16 odd ones (load_bf16_pairs' split of W's
// rows), zeros past column k.
void widen_rows_paired(const BFloat16* a, int64_t sa_row, int64_t sa_col, int64_t m, int64_t k, int64_t ld,
                       float* dst) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = dst + i * ld;
    const BFloat16* src = a + i * sa_row;
    for (int64_t q = 0; q < ld; q += kPair) {
      Lanes16 even, odd;
      if (sa_col == 1 && q + kPair <= k) {
        load_bf16_pairs(src + q, even, odd);
      } else {
        BFloat16 block[kPair] = {};
        for (int64_t p = q; p < std::min(k, q + kPair); ++p) block[p - q] = src[p * sa_col];
        load_bf16_pairs(block, even, odd);
      }
      std::memcpy(row + q, &even, sizeof even);
      std::memcpy(row + q + kLanes16, &odd, sizeof odd);
    }
  }
}

// Runs step.template operator()<R>(i0) over rows [0, m) in groups of kMax rows, then the rest in
// halving groups (a single row is not padded to a group of eight).
template <int64_t kMax, class Step>
void for_row_groups(int64_t m, Step&& step) {
  int64_t i0 = 0;
  for (; i0 + kMax <= m; i0 += kMax) step.template operator()<kMax>(i0);
  if constexpr (kMax > 1) {
    const int64_t rest = m - i0;
    if (rest > 0) for_row_groups<kMax / 2>(rest, [&]<int64_t R>(int64_t i) { step.template operator()<R>(i0 + i); });
  }
}

// Runs step.template operator()<R>(0) with R = m, for m in [1, kMax]: rows that fit one group
// are taken in one pass over b (a group of 8 and one of 2 would read and widen b twice).
template <int64_t kMax, class Step>
void for_exact_rows(int64_t m, Step&& step) {
  [&]<int64_t... I>(std::integer_sequence<int64_t, I...>) {
    (void)((m == I + 1 ? (step.template operator()<I + 1>(int64_t{0}), true) : false) || ...);
  }
  (std::make_integer_sequence<int64_t, kMax>{});
}

// b stored by columns (b[p, j] at b + j * ldw + p, a weight W read as W^T): out[i, j] is the dot
// product of a's row i with W's row j, a's rows widened to float32 once (af) and W's widened as
// they are loaded. A block of C W rows is taken against a group of R rows of af, in one of two
// shapes:
// - Where af has more rows than one wide group and fits in L1 (kDotL1Bytes), two W rows against
//   all of af's rows up to kDotOneGroup (in groups of kDotRows past that): each W vector is
//   widened once for all of them, and the af rows come from L1 (with lanes16_sum's pairwise sum,
//   [128, 784] @ [784, 10] in float16: 26.9 -> 20.0 us on one thread).
// - Otherwise four W rows against four af rows at a time: up to four af rows take one group
//   (two W rows against one af row ran [128, 1024] @ [1024, 1] in bfloat16 25% slower), and a
//   larger af is read from nearer L1 (the narrow shape ran [256, 4096] @ [4096, 16] 30% slower).
constexpr int64_t kDotRows = 8, kDotOneGroup = 12, kDotL1Bytes = int64_t{40} << 10;
constexpr int64_t kDotNarrowCols = 2, kDotWideCols = 4, kDotWideRows = 4;

// Where the dot products go: out[i, j] at out + i * row_stride + j * col_stride, the bias
// indexed by j, or by i where the product runs transposed (narrow_gemm_transposed).
struct DotOut {
  int64_t row_stride, col_stride;
  bool bias_by_row;
};

// The dot products' ends: each accumulator's lanes summed, the bias added, one rounding to T.
// Columns past n (the repeated W rows of the last block) are not stored.
template <int64_t R, int64_t C, class T>
void store_dots(T* out, const DotOut& to, const Lanes16 (&acc)[R][C], int64_t n, int64_t i0, int64_t j0,
                const float* bias) {
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C && j0 + c < n; ++c) {
      float s = lanes16_sum(acc[r][c]);
      if (bias != nullptr) s += bias[to.bias_by_row ? i0 + r : j0 + c];
      out[(i0 + r) * to.row_stride + (j0 + c) * to.col_stride] = static_cast<T>(s);
    }
  }
}

template <int64_t R, int64_t C, class T>
void dot_rows(T* out, const DotOut& to, const float* x, int64_t ld, const T* const* rows, const Lanes16* tail,
              int64_t k, int64_t n, int64_t i0, int64_t j0, const float* bias) {
  const int64_t k_full = k / kLanes16 * kLanes16;
  Lanes16 acc[R][C] = {};
  for (int64_t p = 0; p < k_full; p += kLanes16) {
    Lanes16 wv[C];
    for (int64_t c = 0; c < C; ++c) wv[c] = load_lanes16(rows[c] + p);
    for (int64_t r = 0; r < R; ++r) {
      Lanes16 xv;
      std::memcpy(&xv, x + r * ld + p, sizeof xv);
      for (int64_t c = 0; c < C; ++c) acc[r][c] += xv * wv[c];
    }
  }
  if (k_full < k) {  // a's padding is zero past column k
    for (int64_t r = 0; r < R; ++r) {
      Lanes16 xv;
      std::memcpy(&xv, x + r * ld + k_full, sizeof xv);
      for (int64_t c = 0; c < C; ++c) acc[r][c] += xv * tail[c];
    }
  }
  store_dots<R>(out, to, acc, n, i0, j0, bias);
}

// dot_rows for bfloat16 W rows read 32 values at a time (x in widen_rows_paired's layout).
template <int64_t R, int64_t C>
void dot_rows_paired(BFloat16* out, const DotOut& to, const float* x, int64_t ld, const BFloat16* const* rows,
                     const Lanes16* tail, int64_t k, int64_t n, int64_t i0, int64_t j0, const float* bias) {
  const int64_t k_full = k / kPair * kPair;
  Lanes16 acc[R][C] = {};
  const auto step = [&](const Lanes16* even, const Lanes16* odd, int64_t p) {
    for (int64_t r = 0; r < R; ++r) {
      Lanes16 xe, xo;
      std::memcpy(&xe, x + r * ld + p, sizeof xe);
      std::memcpy(&xo, x + r * ld + p + kLanes16, sizeof xo);
      for (int64_t c = 0; c < C; ++c) {  // two multiply-adds (one sum would take a mul, an fma and an add)
        acc[r][c] += xe * even[c];
        acc[r][c] += xo * odd[c];
      }
    }
  };
  for (int64_t p = 0; p < k_full; p += kPair) {
    Lanes16 even[C], odd[C];
    for (int64_t c = 0; c < C; ++c) load_bf16_pairs(rows[c] + p, even[c], odd[c]);
    step(even, odd, p);
  }
  if (k_full < k) step(tail, tail + C, k_full);  // zeros past k on both sides
  store_dots<R>(out, to, acc, n, i0, j0, bias);
}

// Runs step.template operator()<R>(i0) over af's m rows in the groups the block shape takes.
template <int64_t C, class Step>
void for_dot_groups(int64_t m, Step&& step) {
  if constexpr (C == kDotWideCols) {
    for_row_groups<kDotWideRows>(m, step);
  } else if (m <= kDotOneGroup) {
    for_exact_rows<kDotOneGroup>(m, step);
  } else {
    for_row_groups<kDotRows>(m, step);
  }
}

// Runs block.template operator()<C>(j0) over b's n columns (W's rows) in blocks of C on the pool,
// C by dot_block's two shapes: narrow where a has more rows than one wide group and its copy
// (a_bytes) fits in L1.
template <class Block>
void for_dot_blocks(int64_t m, int64_t a_bytes, int64_t n, Block&& block) {
  const auto run = [&]<int64_t C>() {
    parallel_for((n + C - 1) / C, 8, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) block.template operator()<C>(blk * C);
    });
  };
  if (m > kDotWideRows && a_bytes <= kDotL1Bytes) {
    run.template operator()<kDotNarrowCols>();
  } else {
    run.template operator()<kDotWideCols>();
  }
}

template <int64_t C, class T>
void dot_block(T* out, const DotOut& to, const float* af, int64_t ld, const T* w, int64_t ldw, int64_t m, int64_t k,
               int64_t n, int64_t j0, const float* bias) {
  const T* rows[C];
  for (int64_t c = 0; c < C; ++c) rows[c] = w + std::min(j0 + c, n - 1) * ldw;  // past n: a repeat, unused
  if constexpr (kPaired<T>) {
    const int64_t k_full = k / kPair * kPair;
    Lanes16 tail[2 * C];  // the even halves, then the odd ones
    for (int64_t c = 0; c < C; ++c) load_bf16_pairs_partial(rows[c] + k_full, k - k_full, tail[c], tail[C + c]);
    for_dot_groups<C>(m, [&]<int64_t R>(int64_t i0) {
      dot_rows_paired<R, C>(out, to, af + i0 * ld, ld, rows, tail, k, n, i0, j0, bias);
    });
    return;
  }
  const int64_t k_full = k / kLanes16 * kLanes16;
  Lanes16 tail[C];
  for (int64_t c = 0; c < C; ++c) tail[c] = load_lanes16_partial(rows[c] + k_full, k - k_full);
  for_dot_groups<C>(
      m, [&]<int64_t R>(int64_t i0) { dot_rows<R, C>(out, to, af + i0 * ld, ld, rows, tail, k, n, i0, j0, bias); });
}

#if defined(__x86_64__) && defined(__GNUC__)
// bfloat16 dot products on the CPU's bfloat16 dot-product instruction where it has one
// (AVX512_BF16, chosen at run time): each float32 lane adds the products of one pair of k, so x
// stays bfloat16 and a W vector of 32 values feeds one instruction per x row, with nothing
// widened on either side. The lanes then sum as on the widening path; the instruction rounds
// each lane's update once and takes bfloat16 subnormals as zero (as oneDNN's bfloat16 kernels
// on the same units do).
#define HG_BF16_DOTS 1
#define HG_TARGET_BF16_DOTS __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Off under HG_CPU_ONEDNN=0 too (route.h's narrow_bf16_dots), which widens every 16-bit product to
// float32: the cpu_openblas suite then tests the widening path on these CPUs as well.
bool native_bf16_dots() {
  static const bool on = narrow_bf16_dots(cpu_caps());
  return on;
}
#else
bool native_bf16_dots() { return false; }
#endif
#ifdef HG_BF16_DOTS

constexpr int64_t kBf16Dot = 32;  // k values per instruction

// acc[r][c] += x's row r . wv[c], 32 values of k at once.
template <int64_t R, int64_t C>
HG_TARGET_BF16_DOTS inline __attribute__((always_inline)) void dot_step_bf16(Lanes16 (&acc)[R][C], const uint16_t* x,
                                                                             int64_t ld, const __m512i (&wv)[C]) {
#pragma GCC unroll 16
  for (int64_t r = 0; r < R; ++r) {
    const __m512i xv = _mm512_loadu_si512(x + r * ld);
#pragma GCC unroll 4
    for (int64_t c = 0; c < C; ++c)
      acc[r][c] = _mm512_dpbf16_ps(acc[r][c], reinterpret_cast<__m512bh>(xv), reinterpret_cast<__m512bh>(wv[c]));
  }
}

template <int64_t R, int64_t C>
HG_TARGET_BF16_DOTS void dot_rows_bf16(BFloat16* out, const DotOut& to, const uint16_t* x, int64_t ld,
                                       const BFloat16* const* rows, int64_t k, int64_t n, int64_t i0, int64_t j0,
                                       const float* bias) {
  Lanes16 acc[R][C];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t k_full = k / kBf16Dot * kBf16Dot;
  __m512i wv[C];
  for (int64_t p = 0; p < k_full; p += kBf16Dot) {
#pragma GCC unroll 4
    for (int64_t c = 0; c < C; ++c) wv[c] = _mm512_loadu_si512(rows[c] + p);
    dot_step_bf16<R, C>(acc, x + p, ld, wv);
  }
  if (k_full < k) {  // the last k % 32 values; x is zero past k
    const auto tail = static_cast<__mmask32>((uint64_t{1} << (k - k_full)) - 1);
    for (int64_t c = 0; c < C; ++c) wv[c] = _mm512_maskz_loadu_epi16(tail, rows[c] + k_full);
    dot_step_bf16<R, C>(acc, x + k_full, ld, wv);
  }
  store_dots<R>(out, to, acc, n, i0, j0, bias);
}

template <int64_t C>
void dot_block_bf16(BFloat16* out, const DotOut& to, const uint16_t* x, int64_t ld, const BFloat16* w, int64_t ldw,
                    int64_t m, int64_t k, int64_t n, int64_t j0, const float* bias) {
  const BFloat16* rows[C];
  for (int64_t c = 0; c < C; ++c) rows[c] = w + std::min(j0 + c, n - 1) * ldw;  // past n: a repeat, unused
  for_dot_groups<C>(
      m, [&]<int64_t R>(int64_t i0) { dot_rows_bf16<R, C>(out, to, x + i0 * ld, ld, rows, k, n, i0, j0, bias); });
}

// dot_product's bfloat16 form on those instructions: a copied once as bfloat16 rows of ld values
// (a multiple of 32, zeros past k).
void dot_product_bf16(BFloat16* out, const DotOut& to, const BFloat16* a, int64_t sa_row, int64_t sa_col,
                      const BFloat16* b, int64_t ldw, int64_t m, int64_t k, int64_t n, const float* bias) {
  const int64_t ld = (k + kBf16Dot - 1) / kBf16Dot * kBf16Dot;
  Workspace<uint16_t> x(m * ld);
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = x.data() + i * ld;
    for (int64_t p = 0; p < k; ++p) row[p] = a[i * sa_row + p * sa_col].bits;
    std::fill(row + k, row + ld, uint16_t{0});
  }
  for_dot_blocks(m, m * ld * static_cast<int64_t>(sizeof(uint16_t)), n,
                 [&]<int64_t C>(int64_t j0) { dot_block_bf16<C>(out, to, x.data(), ld, b, ldw, m, k, n, j0, bias); });
}
#endif

// b stored by rows (b[p, j] at b + p * ldw + j, a weight W read as W): out's row i gathers
// a[i, p] * b[p, :] over p. A thread's columns (up to kSpan) are summed into a float32 tile in
// L2, kDepth rows of b at a time: each [kDepth, 32] piece is multiplied in registers, up to
// eight rows of the result by two vectors, so the kDepth rows are read left to right together,
// as streams the hardware prefetchers follow (a deep column slice at a time touches a new page
// per row and stalls on every load), and the next row group finds them in L1.
// Up to kAxOneGroup rows are taken in one group (2 vectors of 12 rows: 24 accumulators).
constexpr int64_t kSpan = 2048, kDepth = 8, kAxRows = 8, kAxVecs = 2, kAxOneGroup = 12;

// The column block width for n columns shared by `pieces` tasks per thread (1, or the k slices
// of narrow_gemm_sliced): whole 32-column blocks, at least 64 and at most kSpan, narrower where a
// wider block would leave a thread without one.
int64_t column_span(int64_t n, int64_t pieces) {
  const int64_t per_task = (n * pieces + num_threads() - 1) / num_threads();
  return std::clamp<int64_t>((per_task + 31) / 32 * 32, 64, kSpan);
}

// A short b is taken in one panel: the accumulators then stay in registers over the whole of k
// instead of going through the tile every kDepth rows ([10,128] @ [128,784], a classifier's
// weight gradient: 19 -> 13 us). Its column slices are at most 256 lines in at most 512 KiB
// (rows 8 KiB apart, a page each, ran 17% slower in one panel: 160 -> 188 us).
constexpr bool whole_depth(int64_t k, int64_t row_bytes) { return k <= 256 && k * row_bytes <= (int64_t{512} << 10); }

// The tile's rows [0, R), columns [jj, jj + 32), as kAxVecs vectors a row, and back: the
// accumulators axpy_rows keeps in registers over its rows of b. Always inlined, so they stay in
// registers (handed by reference to a call, GCC kept them in memory across the loop).
template <int64_t R>
inline __attribute__((always_inline)) void load_tile_block(Lanes16 (&acc)[R][kAxVecs], const float* t, int64_t span,
                                                           int64_t jj) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t v = 0; v < kAxVecs; ++v) std::memcpy(&acc[r][v], t + r * span + jj + v * kLanes16, 64);
}
template <int64_t R>
inline __attribute__((always_inline)) void store_tile_block(float* t, int64_t span, int64_t jj,
                                                            const Lanes16 (&acc)[R][kAxVecs]) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t v = 0; v < kAxVecs; ++v) std::memcpy(t + r * span + jj + v * kLanes16, &acc[r][v], 64);
}

// axpy_rows' last span % 32 columns (from `full` on), in column order.
template <int64_t R, class T>
void axpy_tail_columns(float* t, const float* x, int64_t ld, const T* w, int64_t ldw, int64_t p0, int64_t p1,
                       int64_t span, int64_t full) {
  for (int64_t jj = full; jj < span; jj += kLanes16) {
    const int64_t count = std::min(kLanes16, span - jj);
    const auto bytes = static_cast<size_t>(count) * sizeof(float);
    Lanes16 acc[R] = {};
    for (int64_t r = 0; r < R; ++r) std::memcpy(&acc[r], t + r * span + jj, bytes);
    for (int64_t p = p0; p < p1; ++p) {
      const Lanes16 bv = load_lanes16_partial(w + p * ldw + jj, count);
      for (int64_t r = 0; r < R; ++r) acc[r] += x[r * ld + p] * bv;
    }
    for (int64_t r = 0; r < R; ++r) std::memcpy(t + r * span + jj, &acc[r], bytes);
  }
}

#ifdef HG_BF16_DOTS
// axpy_rows for bfloat16 on the bfloat16 dot-product instruction: two rows of b at a time, their
// 32 columns interleaved into pairs (unpacklo/hi: each 128-bit lane's first four columns, then
// its last four), against a's two values for those rows as one broadcast pair. The tile holds
// each 32 columns in that order (store_tile puts them back); the last span % 32 columns widen.
template <int64_t R>
HG_TARGET_BF16_DOTS void axpy_rows_bf16(float* t, const float* x, int64_t ld, const BFloat16* w, int64_t ldw,
                                        int64_t p0, int64_t p1, int64_t span) {
  constexpr int64_t kWidth = kAxVecs * kLanes16, kMostPairs = 128;  // whole_depth's 256 rows of b at most
  const int64_t pairs = (p1 - p0 + 1) / 2;
  HG_CHECK(pairs <= kMostPairs, "mm", "narrow_gemm took {} rows of b in one pass (at most {})", p1 - p0,
           2 * kMostPairs);
  // a's values as bfloat16 pairs (x holds them widened, exactly), zero past p1.
  uint32_t xp[R][kMostPairs];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t q = 0; q < pairs; ++q) {
      const int64_t p = p0 + 2 * q;
      const uint32_t lo = std::bit_cast<uint32_t>(x[r * ld + p]) >> 16;
      const uint32_t hi = p + 1 < p1 ? std::bit_cast<uint32_t>(x[r * ld + p + 1]) & 0xffff0000u : 0u;
      xp[r][q] = lo | hi;
    }
  const int64_t full = span / kWidth * kWidth;
  for (int64_t jj = 0; jj < full; jj += kWidth) {
    Lanes16 acc[R][kAxVecs];
    load_tile_block<R>(acc, t, span, jj);
    const BFloat16* col = w + jj;
    for (int64_t q = 0; q < pairs; ++q) {
      const int64_t p = p0 + 2 * q;
      const __m512i w0 = _mm512_loadu_si512(col + p * ldw);
      const __m512i w1 = p + 1 < p1 ? _mm512_loadu_si512(col + (p + 1) * ldw) : _mm512_setzero_si512();
      const auto lo = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(w0, w1));
      const auto hi = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(w0, w1));
#pragma GCC unroll 16
      for (int64_t r = 0; r < R; ++r) {
        const auto xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xp[r][q])));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], lo, xv);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], hi, xv);
      }
    }
    store_tile_block<R>(t, span, jj, acc);
  }
  axpy_tail_columns<R>(t, x, ld, w, ldw, p0, p1, span, full);
}
#endif

// Rows [i0, i0 + R) of the tile (row stride span) += a's rows times b's rows [p0, p1).
template <int64_t R, class T>
void axpy_rows(float* t, const float* x, int64_t ld, const T* w, int64_t ldw, int64_t p0, int64_t p1, int64_t span) {
#ifdef HG_BF16_DOTS
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (native_bf16_dots()) return axpy_rows_bf16<R>(t, x, ld, w, ldw, p0, p1, span);
  }
#endif
  constexpr int64_t kWidth = kAxVecs * kLanes16;
  const int64_t full = span / kWidth * kWidth;
  for (int64_t jj = 0; jj < full; jj += kWidth) {
    Lanes16 acc[R][kAxVecs];
    load_tile_block<R>(acc, t, span, jj);
    const T* col = w + jj;
    for (int64_t p = p0; p < p1; ++p) {
      Lanes16 bv[kAxVecs];
      if constexpr (kPaired<T>) {  // the tile holds each 32 columns as 16 even, then 16 odd ones
        static_assert(kAxVecs * kLanes16 == kPair);
        load_bf16_pairs(col + p * ldw, bv[0], bv[1]);
      } else {
        for (int64_t v = 0; v < kAxVecs; ++v) bv[v] = load_lanes16(col + p * ldw + v * kLanes16);
      }
      for (int64_t r = 0; r < R; ++r) {
        const float s = x[r * ld + p];
        for (int64_t v = 0; v < kAxVecs; ++v) acc[r][v] += s * bv[v];
      }
    }
    store_tile_block<R>(t, span, jj, acc);
  }
  axpy_tail_columns<R>(t, x, ld, w, ldw, p0, p1, span, full);
}

// The tile ([m, span], row stride span) = a's rows times b's rows [p0, p1), columns [j0, j0 + span).
template <class T>
void accumulate_tile(float* tile, const float* af, int64_t ld, const T* w, int64_t ldw, int64_t m, int64_t p0,
                     int64_t p1, int64_t j0, int64_t span, int64_t depth) {
  std::fill(tile, tile + m * span, 0.0f);
  for (int64_t q0 = p0; q0 < p1; q0 += depth) {
    const int64_t q1 = std::min(p1, q0 + depth);
    const auto rows = [&]<int64_t R>(int64_t i0) {
      axpy_rows<R>(tile + i0 * span, af + i0 * ld, ld, w + j0, ldw, q0, q1, span);
    };
    if (m <= kAxOneGroup) {
      for_exact_rows<kAxOneGroup>(m, rows);
    } else {
      for_row_groups<kAxRows>(m, rows);
    }
  }
}

// out's columns [j0, j0 + span) from the finished tile: back to column order, the bias added,
// one rounding to T.
template <class T>
void store_tile(T* out, float* tile, int64_t m, int64_t n, int64_t j0, int64_t span, const float* bias) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = tile + i * span;
    if constexpr (kPaired<T>) {  // back to column order from the full 32-column blocks' order
      const bool interleaved = native_bf16_dots();
      for (int64_t q = 0; q + kPair <= span; q += kPair) {
        float block[kPair];
        for (int64_t l = 0; l < kLanes16; ++l) {
          if (interleaved) {  // axpy_rows_bf16: lane 4h + i of each vector from 128-bit lane h
            block[8 * (l / 4) + l % 4] = row[q + l];
            block[8 * (l / 4) + 4 + l % 4] = row[q + kLanes16 + l];
          } else {  // split by parity
            block[2 * l] = row[q + l];
            block[2 * l + 1] = row[q + kLanes16 + l];
          }
        }
        std::memcpy(row + q, block, sizeof block);
      }
    }
    if (bias != nullptr)
      for (int64_t j = 0; j < span; ++j) row[j] += bias[j0 + j];
    store_run(row, out + i * n + j0, span);
  }
}

// The rows of b per pass over the tile. The bfloat16 dot-product instruction does a pass's
// multiply-adds in half the instructions, so with more than one row group the tile's loads and
// stores weigh more: 16 rows then ([16, 4096] @ [4096, 4096] 2.1 -> 1.8 ms on Zen 4; with four
// rows of a, 16 was slower, 0.64 -> 0.86 ms: more streams of b at once).
template <class T>
int64_t pass_depth(int64_t m) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (native_bf16_dots() && m > kAxRows) return 2 * kDepth;
  }
  return kDepth;
}

template <class T>
void axpy_block(T* out, const float* af, int64_t ld, const T* w, int64_t ldw, int64_t m, int64_t k, int64_t n,
                int64_t j0, int64_t span, float* tile, const float* bias) {
  const int64_t depth = whole_depth(k, ldw * static_cast<int64_t>(sizeof(T))) ? k : pass_depth<T>(m);
  accumulate_tile(tile, af, ld, w, ldw, m, 0, k, j0, span, depth);
  store_tile(out, tile, m, n, j0, span, bias);
}

// A short b (whole_depth: a weight gradient g^T @ x at a small batch, b = x) is summed in
// kSliceRows-row slices of k, then the slices' sums added in slice order: each thread reads the
// rows of x that the ops around it (the cast that made x, the forward's dot path) split the same
// way, from its own core's cache, where splitting only the columns made every thread read every
// row, half of them from the other core, and left x shared for the next step's cast to invalidate
// (the linear cell's fp16 step on 2 vCPUs: this product 22-24 -> 20.5 us, x's cast 8.1-8.5 -> 5.9-6.2,
// the step 77-79 -> 72-73). The slices are fixed by k alone, so the bits do not depend on the
// thread count.
constexpr int64_t kSliceRows = 64;

template <class T>
bool sliced_depth(int64_t k, int64_t ldw) {
  return k >= 2 * kSliceRows && whole_depth(k, ldw * static_cast<int64_t>(sizeof(T)));
}

// Tasks are (slice, column block) pairs, slice-major: with two threads each takes one slice
// over every column; with more, the columns are split as well (the sums do not depend on it).
template <class T>
void narrow_gemm_sliced(T* out, const float* af, int64_t ld, const T* b, int64_t ldw, int64_t m, int64_t k, int64_t n,
                        const float* bias) {
  const int64_t slices = (k + kSliceRows - 1) / kSliceRows;
  const int64_t span = column_span(n, slices);
  const int64_t blocks = (n + span - 1) / span, tile_size = m * span;
  Workspace<float> sums(slices * blocks * tile_size);
  const auto tile = [&](int64_t slice, int64_t block) { return sums.data() + (slice * blocks + block) * tile_size; };
  parallel_for(slices * blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t slice = t / blocks, block = t % blocks, j0 = block * span;
      accumulate_tile(tile(slice, block), af, ld, b, ldw, m, slice * kSliceRows, std::min(k, (slice + 1) * kSliceRows),
                      j0, std::min(span, n - j0), k);
    }
  });
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t block = b0; block < b1; ++block) {
      const int64_t j0 = block * span, width = std::min(span, n - j0);
      float* total = tile(0, block);
      for (int64_t slice = 1; slice < slices; ++slice) {
        const float* part = tile(slice, block);
        for (int64_t i = 0; i < m * width; ++i) total[i] += part[i];
      }
      store_tile(out, total, m, n, j0, width, bias);
    }
  });
}

// out = a @ b through the dot path, b's column j (W's row j) at b + j * ldw, contiguous along
// k; `to` says where out[i, j] goes and which index the bias follows.
template <class T>
void dot_product(T* out, const DotOut& to, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t ldw,
                 int64_t m, int64_t k, int64_t n, const T* bias, int64_t bias_size) {
  Workspace<float> bias_f(bias != nullptr ? bias_size : 0);
  if (bias != nullptr) load_run(bias, bias_f.data(), bias_size);
  const float* bias_data = bias != nullptr ? bias_f.data() : nullptr;
#ifdef HG_BF16_DOTS
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (native_bf16_dots()) return dot_product_bf16(out, to, a, sa_row, sa_col, b, ldw, m, k, n, bias_data);
  }
#endif
  constexpr int64_t width = kPaired<T> ? kPair : kLanes16;
  const int64_t ld = (k + width - 1) / width * width;
  Workspace<float> af(m * ld);
  if constexpr (kPaired<T>) {
    widen_rows_paired(a, sa_row, sa_col, m, k, ld, af.data());
  } else {
    widen_rows(a, sa_row, sa_col, m, k, ld, af.data());
  }
  for_dot_blocks(m, m * ld * static_cast<int64_t>(sizeof(float)), n,
                 [&]<int64_t C>(int64_t j0) { dot_block<C>(out, to, af.data(), ld, b, ldw, m, k, n, j0, bias_data); });
}

}  // namespace

template <class T>
void narrow_gemm(T* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                 int64_t m, int64_t k, int64_t n, const T* bias) {
  if (sb_row == 1 && sb_col != 1) {  // b by columns: dot products with W's rows
    dot_product(out, DotOut{n, 1, false}, a, sa_row, sa_col, b, sb_col, m, k, n, bias, n);
    return;
  }
  const int64_t ld = (k + kLanes16 - 1) / kLanes16 * kLanes16;
  Workspace<float> af(m * ld), bias_f(bias != nullptr ? n : 0);
  widen_rows(a, sa_row, sa_col, m, k, ld, af.data());
  if (bias != nullptr) load_run(bias, bias_f.data(), n);
  const float* bias_data = bias != nullptr ? bias_f.data() : nullptr;
  if (sliced_depth<T>(k, sb_row)) return narrow_gemm_sliced(out, af.data(), ld, b, sb_row, m, k, n, bias_data);
  const int64_t span = column_span(n, 1);
  const int64_t blocks = (n + span - 1) / span;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    Workspace<float> tile(m * span);
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t j0 = blk * span;
      axpy_block(out, af.data(), ld, b, sb_row, m, k, n, j0, std::min(span, n - j0), tile.data(), bias_data);
    }
  });
}

template <class T>
void narrow_gemm_transposed(T* out, const T* a, int64_t sa_row, const T* b, int64_t sb_row, int64_t sb_col, int64_t m,
                            int64_t k, int64_t n, const T* bias) {
  // out^T = b^T @ a^T: b^T's n rows are the small operand, a's rows the dot products' other side.
  dot_product(out, DotOut{1, n, true}, b, sb_col, sb_row, a, sa_row, n, k, m, bias, n);
}

template void narrow_gemm<float>(float*, const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, const float*);
template void narrow_gemm<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, const BFloat16*, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, const BFloat16*);
template void narrow_gemm<Half>(Half*, const Half*, int64_t, int64_t, const Half*, int64_t, int64_t, int64_t, int64_t,
                                int64_t, const Half*);
template void narrow_gemm_transposed<float>(float*, const float*, int64_t, const float*, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, const float*);
template void narrow_gemm_transposed<BFloat16>(BFloat16*, const BFloat16*, int64_t, const BFloat16*, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, const BFloat16*);
template void narrow_gemm_transposed<Half>(Half*, const Half*, int64_t, const Half*, int64_t, int64_t, int64_t, int64_t,
                                           int64_t, const Half*);

}  // namespace hg::cpu
