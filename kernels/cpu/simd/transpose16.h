// 16 x 16 transpositions of 32-bit values in AVX-512 registers, and the 16-bit matrix transposition
// built on them: conv/layouts.cpp's moves between oneDNN's blocks and halfgrad's layouts, and
// conv/winograd_bf16.cpp's NCHW activations. Compiled where the build targets AVX-512 (the
// header is empty elsewhere; its callers check __AVX512F__ too).
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>

namespace hg::cpu {

// Transposes 16 rows of 16 32-bit values in registers: r[j][i] = r[i][j] afterwards. 32-bit pairs,
// then 64-bit pairs within each 128-bit lane, then the lanes across registers.
inline void transpose16x16(__m512i r[16]) {
  __m512i s[16], u[16];
  for (int k = 0; k < 8; ++k) {
    s[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    s[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // u[4 g + c], lane L: column 4 L + c of rows 4 g .. 4 g + 3.
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(s[4 * g], s[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(s[4 * g], s[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(s[4 * g + 1], s[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(s[4 * g + 1], s[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i low01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44),
                  low23 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i high01 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                  high23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(low01, high01, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(low01, high01, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(low23, high23, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(low23, high23, 0xdd);
  }
}

// 16 values as the 16 32-bit lanes of a register (16-bit ones zero-extended), and back.
inline __m512i load_row(const float* p) { return _mm512_loadu_si512(p); }
inline __m512i load_row(const uint16_t* p) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline void store_row(float* p, __m512i v) { _mm512_storeu_si512(p, v); }
inline void store_row(uint16_t* p, __m512i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
}

// dst [cols][rows] = src [rows][cols] transposed, 16-bit values, rows and cols multiples of 16.
inline void transpose_16bit(const uint16_t* __restrict src, uint16_t* __restrict dst, int64_t rows, int64_t cols) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) r[i] = load_row(src + (r0 + i) * cols + c0);
      transpose16x16(r);
      for (int64_t i = 0; i < 16; ++i) store_row(dst + (c0 + i) * rows + r0, r[i]);
    }
}

// The same for n matrices one after another (a batch's samples: NCHW <-> NHWC).
inline void transpose_16bit(const uint16_t* __restrict src, uint16_t* __restrict dst, int64_t n, int64_t rows,
                            int64_t cols) {
  for (int64_t i = 0; i < n; ++i) transpose_16bit(src + i * rows * cols, dst + i * rows * cols, rows, cols);
}

}  // namespace hg::cpu

#endif
