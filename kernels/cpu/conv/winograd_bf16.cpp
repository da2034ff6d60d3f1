#include "kernels/cpu/conv/winograd_bf16.h"

// GCC 12 flags the undefined pass-through operands inside its own AVX-512 intrinsics as used
// uninitialized once they are inlined (GCC bug 105593, fixed in 13), as in conv/layouts.cpp;
// before the includes, since simd/transpose16.h's functions are compiled here too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "framework/error.h"
#include "kernels/cpu/conv/im2col.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/simd/transpose16.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/workspace.h"

// The whole file targets the bfloat16 dot product; its entry points run only where
// winograd_bf16_available() says the CPU has it.
#if defined(__AVX512F__) && defined(__GNUC__) && defined(__x86_64__)
#define HG_WINOGRAD_BF16 1
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#endif
#endif

namespace hg::cpu {

#ifdef HG_WINOGRAD_BF16
namespace {

// Tiles transformed and multiplied per block. Their transformed inputs (16 x tiles x in channels,
// bfloat16) and the GEMMs' sums (16 x tiles x 64 channels, float32) stay in the core's L2 cache;
// 12 tiles ran fastest on ResNet-18's layers (forward, batch 8, NHWC, one Zen 4 thread,
// 2026-11-29, 12 / 24 / 48 tiles: 64 channels at 32x32 1.73 / 1.77 / 1.94 ms, 128 at 16x16 1.43 /
// 1.47 / 1.57, 256 at 8x8 1.32 / 1.39 / 1.39).
constexpr int64_t kTileBlock = 12;
constexpr int64_t kOutBlock = 64;  // output channels per GEMM pass: four registers of 16
constexpr int kTileRows = 6;       // tiles per GEMM micro-kernel: 6 x 4 accumulators

__m512 load16(const uint16_t* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
void store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}
// v rounded to bfloat16 (as store16 rounds) and widened back: exactly the bfloat16 value.
__m512 load16_rounded(__m512 v) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v))), 16));
}

// One GEMM of the algorithm, in words of bfloat16 pairs along its reduction: m [rows][16 vectors]
// (float32, rows ld apart) = the sum over `pairs` of rows' broadcast words times the vectors'
// 16-word runs. Row i's word of pair p is at bcast[i * bcast_row + p * bcast_pair]; vector j's
// run of pair p at vec[p * vec_pair + 16 j].
struct Gemm {
  const uint32_t* bcast;
  int64_t bcast_row, bcast_pair;
  const uint32_t* vec;
  int64_t vec_pair, pairs;
  float* m;
  int64_t ld;
};

template <int MR, int NV>
void multiply(const Gemm& g) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint32_t* b = g.bcast;
  const uint32_t* u = g.vec;
  for (int64_t p = 0; p < g.pairs; ++p, u += g.vec_pair, b += g.bcast_pair) {
    __m512i uv[NV];
    for (int j = 0; j < NV; ++j) uv[j] = _mm512_loadu_si512(u + 16 * j);
    for (int i = 0; i < MR; ++i) {
      const __m512i w = _mm512_set1_epi32(static_cast<int>(b[i * g.bcast_row]));
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], reinterpret_cast<__m512bh>(uv[j]), reinterpret_cast<__m512bh>(w));
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(g.m + i * g.ld + 16 * j, acc[i][j]);
}

template <int NV>
void multiply_rows(int rows, const Gemm& g) {
  switch (rows) {
    case 6: return multiply<6, NV>(g);
    case 5: return multiply<5, NV>(g);
    case 4: return multiply<4, NV>(g);
    case 3: return multiply<3, NV>(g);
    case 2: return multiply<2, NV>(g);
    default: return multiply<1, NV>(g);
  }
}

// rows (1 .. kTileRows) x vectors (1 .. 4) of a Gemm.
void multiply_block(int rows, int vectors, const Gemm& g) {
  switch (vectors) {
    case 4: return multiply_rows<4>(rows, g);
    case 3: return multiply_rows<3>(rows, g);
    case 2: return multiply_rows<2>(rows, g);
    default: return multiply_rows<1>(rows, g);
  }
}

// Where tile t of a sample range lies: its sample and its top-left output position.
struct TileAt {
  int64_t sample, y, x;
};
TileAt tile_at(int64_t t, int64_t tiles_y, int64_t tiles_x) {
  const int64_t per_sample = tiles_y * tiles_x, r = t % per_sample;
  return {t / per_sample, 2 * (r / tiles_x), 2 * (r % tiles_x)};
}

// B^T d B of one tile's 4x4 input patch (zero outside the image), channels c0 .. c0 + 16: r[xi].
void transform_patch(const uint16_t* x, int64_t in, int64_t h, int64_t w, const TileAt& at, int64_t c0,
                     __m512 (&r)[16]) {
  const __m512 zero = _mm512_setzero_ps();
  const uint16_t* sample = x + at.sample * h * w * in;
  __m512 d[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t iy = at.y - 1 + i, ix = at.x - 1 + j;
      d[i][j] = iy < 0 || iy >= h || ix < 0 || ix >= w ? zero : load16(sample + (iy * w + ix) * in + c0);
    }
  __m512 s[4][4];  // B^T d
  for (int j = 0; j < 4; ++j) {
    s[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
    s[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
    s[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
    s[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
  }
  for (int i = 0; i < 4; ++i) {  // (B^T d) B
    r[i * 4 + 0] = _mm512_sub_ps(s[i][0], s[i][2]);
    r[i * 4 + 1] = _mm512_add_ps(s[i][1], s[i][2]);
    r[i * 4 + 2] = _mm512_sub_ps(s[i][2], s[i][1]);
    r[i * 4 + 3] = _mm512_sub_ps(s[i][1], s[i][3]);
  }
}

// v [16][kTileBlock][in] for tile `slot`: its transformed patch, rounded to bfloat16.
void transform_input(const uint16_t* x, int64_t in, int64_t h, int64_t w, const TileAt& at, int64_t slot, uint16_t* v) {
  for (int64_t c0 = 0; c0 < in; c0 += 16) {
    __m512 r[16];
    transform_patch(x, in, h, w, at, c0, r);
    for (int xi = 0; xi < 16; ++xi) store16(v + (xi * kTileBlock + slot) * in + c0, r[xi]);
  }
}

// The 2x2 outputs of tile `slot` for output channels o0 .. o0 + 16 vectors: A^T m A of its 16
// float32 sums, plus the bias, ReLU'd with relu (NaN kept), rounded into y (NHWC).
void transform_output(const float* m, int vectors, const float* bias, bool relu, int64_t out, int64_t h, int64_t w,
                      const TileAt& at, int64_t slot, int64_t o0, uint16_t* y) {
  const __m512 zero = _mm512_setzero_ps();
  uint16_t* sample = y + at.sample * h * w * out;
  for (int k = 0; k < vectors; ++k) {
    __m512 q[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) q[i][j] = _mm512_loadu_ps(m + ((i * 4 + j) * kTileBlock + slot) * kOutBlock + 16 * k);
    __m512 a[2][4];  // A^T m
    for (int j = 0; j < 4; ++j) {
      a[0][j] = _mm512_add_ps(_mm512_add_ps(q[0][j], q[1][j]), q[2][j]);
      a[1][j] = _mm512_sub_ps(_mm512_sub_ps(q[1][j], q[2][j]), q[3][j]);
    }
    const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + o0 + 16 * k) : zero;
    for (int i = 0; i < 2; ++i) {  // (A^T m) A
      __m512 r[2] = {_mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), a[i][2]),
                     _mm512_sub_ps(_mm512_sub_ps(a[i][1], a[i][2]), a[i][3])};
      for (int j = 0; j < 2; ++j) {
        r[j] = _mm512_add_ps(r[j], b);
        if (relu) r[j] = _mm512_max_ps(zero, r[j]);  // max(0, NaN) is the NaN (its second operand)
        store16(sample + ((at.y + i) * w + at.x + j) * out + o0 + 16 * k, r[j]);
      }
    }
  }
}

// The convolution of n NHWC samples.
void conv_nhwc(const uint16_t* x, uint16_t* y, int64_t n, int64_t in, int64_t out, int64_t h, int64_t w,
               const uint32_t* u, const float* bias, bool relu) {
  const int64_t tiles_y = h / 2, tiles_x = w / 2, tiles = n * tiles_y * tiles_x, pairs = in / 2;
  Workspace<uint16_t> v(16 * kTileBlock * in);
  Workspace<float> m(16 * kTileBlock * kOutBlock);
  for (int64_t t0 = 0; t0 < tiles; t0 += kTileBlock) {
    const int64_t count = std::min(kTileBlock, tiles - t0);
    for (int64_t t = 0; t < count; ++t) transform_input(x, in, h, w, tile_at(t0 + t, tiles_y, tiles_x), t, v.data());
    for (int64_t o0 = 0; o0 < out; o0 += kOutBlock) {
      const int vectors = static_cast<int>(std::min<int64_t>(kOutBlock, out - o0) / 16);
      for (int64_t xi = 0; xi < 16; ++xi) {
        const uint32_t* u_xi = u + xi * pairs * out + o0;
        for (int64_t t = 0; t < count; t += kTileRows) {
          const auto* v_t = reinterpret_cast<const uint32_t*>(v.data() + (xi * kTileBlock + t) * in);
          multiply_block(static_cast<int>(std::min<int64_t>(kTileRows, count - t)), vectors,
                         {v_t, pairs, 1, u_xi, out, pairs, m.data() + (xi * kTileBlock + t) * kOutBlock, kOutBlock});
        }
      }
      for (int64_t t = 0; t < count; ++t)
        transform_output(m.data(), vectors, bias, relu, out, h, w, tile_at(t0 + t, tiles_y, tiles_x), t, o0, y);
    }
  }
}

// G g G^T of 16 kernels at once: k[tap] holds tap `tap` of each kernel, one per lane; out[xi] the
// transformed position xi of each.
void transform_filter(const __m512 (&k)[9], __m512 (&out)[16]) {
  const __m512 half = _mm512_set1_ps(0.5f);
  __m512 r[4][3];  // G g: rows 0, (0+1+2)/2, (0-1+2)/2, 2
  for (int j = 0; j < 3; ++j) {
    const __m512 a = k[j], b = k[3 + j], c = k[6 + j];
    r[0][j] = a;
    r[1][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(a, b), c));
    r[2][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(a, b), c));
    r[3][j] = c;
  }
  for (int i = 0; i < 4; ++i) {  // (G g) G^T, the same on the columns
    const __m512 a = r[i][0], b = r[i][1], c = r[i][2];
    out[i * 4 + 0] = a;
    out[i * 4 + 1] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(a, b), c));
    out[i * 4 + 2] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(a, b), c));
    out[i * 4 + 3] = c;
  }
}

// Output channel o's taps as 9 rows of c input channels ([tap][c], OHWI's order): the weight
// itself for OHWI (buf unused, may be null), regrouped into `buf` (9 * c values) for OIHW.
const uint16_t* taps_of(const uint16_t* w, bool ohwi, int64_t o, int64_t c, uint16_t* buf) {
  if (ohwi) return w + o * 9 * c;
  const uint16_t* kernel = w + o * c * 9;
  for (int64_t i = 0; i < c; ++i)
    for (int t = 0; t < 9; ++t) buf[t * c + i] = kernel[i * 9 + t];
  return buf;
}

// The 16 transformed positions of the kernels of input channels c0 .. c0 + 16 of one output
// channel (taps: taps_of's rows), rotated 180 degrees with `rotated`.
void transform_taps(const uint16_t* taps, int64_t c, int64_t c0, bool rotated, __m512 (&out)[16]) {
  __m512 k[9];
  for (int t = 0; t < 9; ++t) k[t] = load16(taps + (rotated ? 8 - t : t) * c + c0);
  transform_filter(k, out);
}

// 16 words of pairs: word l is lo[l] | hi[l] << 16, both rounded to bfloat16.
__m512i pair_words(__m512 lo, __m512 hi) {
  const __m512i l = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(lo)));
  const __m512i h = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(hi)));
  return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}

// The forward's u [16][c/2][o] (words: pairs of input channels) for output channels o0 .. o0 + 16:
// per 32 input channels, each output channel's transformed kernels as words of channel pairs
// ([o][c/2]), then transposed 16 x 16 into u's [c/2][o].
void forward_filter_block(const uint16_t* w, bool ohwi, int64_t o, int64_t c, int64_t o0, uint32_t* u) {
  std::vector<uint16_t> regrouped(ohwi ? 0 : static_cast<size_t>(16 * 9 * c));
  const uint16_t* taps[16];
  for (int64_t i = 0; i < 16; ++i) taps[i] = taps_of(w, ohwi, o0 + i, c, ohwi ? nullptr : regrouped.data() + i * 9 * c);
  const int64_t pairs = c / 2;
  for (int64_t c0 = 0; c0 < c; c0 += 32) {
    __m512i words[16][16];            // [xi][output channel]: 16 pairs of input channels
    const bool whole = c0 + 32 <= c;  // else 16 channels are left: 8 pairs
    for (int64_t i = 0; i < 16; ++i) {
      __m512 lo[16], hi[16];  // channels c0 .. c0 + 16 and c0 + 16 .. c0 + 32
      transform_taps(taps[i], c, c0, false, lo);
      if (whole)
        transform_taps(taps[i], c, c0 + 16, false, hi);
      else
        for (__m512& v : hi) v = _mm512_setzero_ps();
      // 32 channels in order, rounded: word j is the pair (c0 + 2j, c0 + 2j + 1).
      for (int xi = 0; xi < 16; ++xi) words[xi][i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi[xi], lo[xi]));
    }
    for (int xi = 0; xi < 16; ++xi) {
      transpose16x16(words[xi]);  // [pair][output channel]
      for (int64_t j = 0; j < (whole ? 16 : 8); ++j)
        _mm512_storeu_si512(u + (xi * pairs + c0 / 2 + j) * o + o0, words[xi][j]);
    }
  }
}

// The input gradient's u [16][o/2][c] (words: pairs of output channels, rotated kernels) for
// output-channel pair p: both channels' transformed kernels, 16 input channels at a time,
// interleaved into words.
void input_gradient_filter_pair(const uint16_t* w, bool ohwi, int64_t o, int64_t c, int64_t p, uint32_t* u) {
  std::vector<uint16_t> regrouped(ohwi ? 0 : static_cast<size_t>(2 * 9 * c));
  const uint16_t* even = taps_of(w, ohwi, 2 * p, c, regrouped.data());
  const uint16_t* odd = taps_of(w, ohwi, 2 * p + 1, c, ohwi ? nullptr : regrouped.data() + 9 * c);
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    __m512 lo[16], hi[16];
    transform_taps(even, c, c0, true, lo);
    transform_taps(odd, c, c0, true, hi);
    for (int xi = 0; xi < 16; ++xi) _mm512_storeu_si512(u + (xi * (o / 2) + p) * c + c0, pair_words(lo[xi], hi[xi]));
  }
}

// A g A^T of one tile's 2x2 output gradient g, channels o0 .. o0 + 16: r[xi] (the gradient of the
// forward's 16 sums, whose output transform is A^T m A).
void transform_gradient(const uint16_t* gy, int64_t out, int64_t h, int64_t w, const TileAt& at, int64_t o0,
                        __m512 (&r)[16]) {
  const __m512 zero = _mm512_setzero_ps();
  const uint16_t* top = gy + ((at.sample * h + at.y) * w + at.x) * out + o0;
  const __m512 g00 = load16(top), g01 = load16(top + out), g10 = load16(top + w * out),
               g11 = load16(top + w * out + out);
  const __m512 rows[4][2] = {{g00, g01},  // A g
                             {_mm512_add_ps(g00, g10), _mm512_add_ps(g01, g11)},
                             {_mm512_sub_ps(g00, g10), _mm512_sub_ps(g01, g11)},
                             {_mm512_sub_ps(zero, g10), _mm512_sub_ps(zero, g11)}};
  for (int i = 0; i < 4; ++i) {  // (A g) A^T
    r[i * 4 + 0] = rows[i][0];
    r[i * 4 + 1] = _mm512_add_ps(rows[i][0], rows[i][1]);
    r[i * 4 + 2] = _mm512_sub_ps(rows[i][0], rows[i][1]);
    r[i * 4 + 3] = _mm512_sub_ps(zero, rows[i][1]);
  }
}

// G^T d G: the 9 taps' gradients (out[tap]) of 16 kernels from their transformed gradients d[xi].
void untransform_filter(const __m512 (&d)[16], __m512 (&out)[9]) {
  const __m512 half = _mm512_set1_ps(0.5f);
  __m512 e[4][3];  // d G, row by row
  for (int i = 0; i < 4; ++i) {
    const __m512 a = d[i * 4], b = d[i * 4 + 1], c = d[i * 4 + 2], f = d[i * 4 + 3];
    const __m512 sum = _mm512_mul_ps(half, _mm512_add_ps(b, c));
    e[i][0] = _mm512_add_ps(a, sum);
    e[i][1] = _mm512_mul_ps(half, _mm512_sub_ps(b, c));
    e[i][2] = _mm512_add_ps(sum, f);
  }
  for (int j = 0; j < 3; ++j) {  // G^T (d G), column by column
    const __m512 a = e[0][j], b = e[1][j], c = e[2][j], f = e[3][j];
    const __m512 sum = _mm512_mul_ps(half, _mm512_add_ps(b, c));
    out[j] = _mm512_add_ps(a, sum);
    out[3 + j] = _mm512_mul_ps(half, _mm512_sub_ps(b, c));
    out[6 + j] = _mm512_add_ps(sum, f);
  }
}

// du [16][out][in] (float32) = for each transformed position, the sum over the tiles of n NHWC
// samples of the transformed output gradient (out) times the transformed input patch (in). The
// reduction runs over pairs of tiles, so both sides are transformed two tiles at a time into
// words (an odd last tile pairs with zeros).
void transformed_filter_gradient(const uint16_t* x, const uint16_t* gy, int64_t n, int64_t in, int64_t out, int64_t h,
                                 int64_t w, float* du) {
  const int64_t tiles_y = h / 2, tiles_x = w / 2, tiles = n * tiles_y * tiles_x, pairs = (tiles + 1) / 2;
  Workspace<uint32_t> v(16 * pairs * in), g(16 * pairs * out);
  for (int64_t p = 0; p < pairs; ++p) {
    const TileAt first = tile_at(2 * p, tiles_y, tiles_x), second = tile_at(2 * p + 1, tiles_y, tiles_x);
    const bool both = 2 * p + 1 < tiles;
    __m512 lo[16], hi[16];
    for (__m512& r : hi) r = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < in; c0 += 16) {
      transform_patch(x, in, h, w, first, c0, lo);
      if (both) transform_patch(x, in, h, w, second, c0, hi);
      for (int xi = 0; xi < 16; ++xi)
        _mm512_storeu_si512(v.data() + (xi * pairs + p) * in + c0, pair_words(lo[xi], hi[xi]));
    }
    for (int64_t o0 = 0; o0 < out; o0 += 16) {
      transform_gradient(gy, out, h, w, first, o0, lo);
      if (both) transform_gradient(gy, out, h, w, second, o0, hi);
      for (int xi = 0; xi < 16; ++xi)
        _mm512_storeu_si512(g.data() + (xi * pairs + p) * out + o0, pair_words(lo[xi], hi[xi]));
    }
  }
  for (int64_t xi = 0; xi < 16; ++xi)
    for (int64_t c0 = 0; c0 < in; c0 += kOutBlock) {
      const int vectors = static_cast<int>(std::min<int64_t>(kOutBlock, in - c0) / 16);
      for (int64_t o0 = 0; o0 < out; o0 += kTileRows)
        multiply_block(static_cast<int>(std::min<int64_t>(kTileRows, out - o0)), vectors,
                       {g.data() + xi * pairs * out + o0, 1, out, v.data() + xi * pairs * in + c0, in, pairs,
                        du + (xi * out + o0) * in + c0, in});
    }
}

// dw (OIHW, or OHWI with ohwi) = G^T du G for every kernel: bfloat16 rounded once, or float32
// holding those rounded values (`widened`), or the float32 sums.
template <class T>
void write_filter_gradient(const float* du, int64_t out, int64_t in, bool ohwi, bool widened, T* dw) {
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c0 = 0; c0 < in; c0 += 16) {
      __m512 d[16], taps[9];
      for (int xi = 0; xi < 16; ++xi) d[xi] = _mm512_loadu_ps(du + (xi * out + o) * in + c0);
      untransform_filter(d, taps);
      alignas(64) T lanes[9][16];
      for (int t = 0; t < 9; ++t) {
        if constexpr (std::is_same_v<T, float>)
          _mm512_store_ps(lanes[t], widened ? load16_rounded(taps[t]) : taps[t]);
        else
          store16(reinterpret_cast<uint16_t*>(lanes[t]), taps[t]);
      }
      if (ohwi) {
        for (int t = 0; t < 9; ++t) std::memcpy(dw + (o * 9 + t) * in + c0, lanes[t], sizeof lanes[t]);
      } else {  // 16 kernels of 9 taps, one run of 144 values
        T* run = dw + (o * in + c0) * 9;
        for (int l = 0; l < 16; ++l)
          for (int t = 0; t < 9; ++t) run[l * 9 + t] = lanes[t][l];
      }
    }
}

}  // namespace

bool winograd_bf16_available() {
  const CpuCaps& caps = cpu_caps();
  return caps.avx512_bf16 && caps.native_bf16();
}

void winograd_bf16_weights(const BFloat16* w, bool ohwi, int64_t o, int64_t c, bool input_gradient, BFloat16* u) {
  HG_CHECK(winograd_bf16_available() && o % 16 == 0 && c % 16 == 0, "conv2d",
           "the bfloat16 Winograd filter transform needs AVX512_BF16 and channels in multiples of 16, got {} x {}", o,
           c);
  const auto* wb = reinterpret_cast<const uint16_t*>(w);
  auto* words = reinterpret_cast<uint32_t*>(u);
  if (input_gradient) {
    run_parallel(o / 2, [&](int64_t p) { input_gradient_filter_pair(wb, ohwi, o, c, p, words); });
    return;
  }
  run_parallel(o / 16, [&](int64_t block) { forward_filter_block(wb, ohwi, o, c, 16 * block, words); });
}

void winograd_bf16_conv(const BFloat16* x, BFloat16* y, int64_t n, int64_t in, int64_t out, int64_t h, int64_t w,
                        bool nhwc, const BFloat16* u, const float* bias, bool relu) {
  HG_CHECK(winograd_bf16_available() && winograd_bf16_takes(in, out, h, w, nhwc), "conv2d",
           "the bfloat16 Winograd kernel does not take {} -> {} channels at {}x{} ({})", in, out, h, w,
           nhwc ? "NHWC" : "NCHW");
  const auto* xb = reinterpret_cast<const uint16_t*>(x);
  auto* yb = reinterpret_cast<uint16_t*>(y);
  const auto* words = reinterpret_cast<const uint32_t*>(u);
  if (nhwc) return conv_nhwc(xb, yb, n, in, out, h, w, words, bias, relu);
  // NCHW: each sample transposed to NHWC and the result back.
  const int64_t hw = h * w;
  Workspace<uint16_t> x_nhwc(n * in * hw), y_nhwc(n * out * hw);
  transpose_16bit(xb, x_nhwc.data(), n, in, hw);
  conv_nhwc(x_nhwc.data(), y_nhwc.data(), n, in, out, h, w, words, bias, relu);
  transpose_16bit(y_nhwc.data(), yb, n, hw, out);
}

void winograd_bf16_filter_gradient(const BFloat16* x, const BFloat16* gy, int64_t n, int64_t in, int64_t out, int64_t h,
                                   int64_t w, bool nhwc, bool ohwi, void* dw, WinogradFilterGradient form, float* db) {
  HG_CHECK(winograd_bf16_available() && winograd_bf16_takes(in, out, h, w, nhwc) && dw != nullptr, "conv2d",
           "the bfloat16 Winograd weight gradient does not take {} -> {} channels at {}x{} ({}){}", in, out, h, w,
           nhwc ? "NHWC" : "NCHW", dw == nullptr ? ", or an output of null" : "");
  const auto* xb = reinterpret_cast<const uint16_t*>(x);
  const auto* gb = reinterpret_cast<const uint16_t*>(gy);
  const int64_t hw = h * w;
  std::optional<Workspace<uint16_t>> x_nhwc, gy_nhwc;
  if (!nhwc) {  // each sample transposed to NHWC
    x_nhwc.emplace(n * in * hw);
    gy_nhwc.emplace(n * out * hw);
    transpose_16bit(xb, x_nhwc->data(), n, in, hw);
    transpose_16bit(gb, gy_nhwc->data(), n, out, hw);
    xb = x_nhwc->data();
    gb = gy_nhwc->data();
  }
  Workspace<float> du(16 * out * in);
  transformed_filter_gradient(xb, gb, n, in, out, h, w, du.data());
  if (form == WinogradFilterGradient::Rounded)
    write_filter_gradient(du.data(), out, in, ohwi, false, static_cast<BFloat16*>(dw));
  else
    write_filter_gradient(du.data(), out, in, ohwi, form == WinogradFilterGradient::Widened, static_cast<float*>(dw));
  if (db != nullptr) column_sums(reinterpret_cast<const BFloat16*>(gb), n * hw, out, db, false);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else  // no AVX-512 in this build

bool winograd_bf16_available() { return false; }
void winograd_bf16_weights(const BFloat16*, bool, int64_t, int64_t, bool, BFloat16*) {
  fail("conv2d", "the bfloat16 Winograd kernel is not built (no AVX-512 in this build)");
}
void winograd_bf16_conv(const BFloat16*, BFloat16*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, const BFloat16*,
                        const float*, bool) {
  fail("conv2d", "the bfloat16 Winograd kernel is not built (no AVX-512 in this build)");
}
void winograd_bf16_filter_gradient(const BFloat16*, const BFloat16*, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                                   bool, void*, WinogradFilterGradient, float*) {
  fail("conv2d", "the bfloat16 Winograd kernel is not built (no AVX-512 in this build)");
}

#endif

bool winograd_bf16_takes(int64_t in, int64_t out, int64_t h, int64_t w, bool nhwc) {
  return in > 0 && out > 0 && in % 16 == 0 && out % 16 == 0 && h > 0 && w > 0 && h % 2 == 0 && w % 2 == 0 &&
         (nhwc || (h * w) % 16 == 0);
}

}  // namespace hg::cpu
