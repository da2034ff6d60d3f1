// Bulk conversions between storage types and the float32 that kernels compute in. float16 uses
// the F16C instructions where the build targets them (8 values per instruction, the same round-
// to-nearest-even and NaN results as hg::Half); bfloat16 uses AVX-512 (widening by a shift, and
// AVX512_BF16's vcvtneps2bf16 for rounding, or hg::BFloat16's integer rounding in 16 lanes where
// the CPU lacks it, with the same results as hg::BFloat16); everything
// else is a plain loop the compiler vectorises.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/half.h"
#include "kernels/cpu/simd/lanes16.h"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace hg::cpu {

template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// dst[i] = Acc(src[i]) for i < n.
template <class T, class Acc>
inline void load_run(const T* src, Acc* dst, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<Acc, float>) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  }
#endif
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<Acc, float>) {
    for (; i + 16 <= n; i += 16) {  // a bfloat16 is the top half of a float32
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      // (the maskz shift: gcc 12 warns about the unmasked one's undefined pass-through)
      _mm512_storeu_si512(dst + i, _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, b), 16));
    }
  }
#endif
  if constexpr (kMaskedLanes16 && is_16bit_float<T> && std::is_same_v<Acc, float>) {
    if (i < n && n - i <= kLanes16) {  // the last n % 8 or n % 16 values in one masked load and store
      store_lanes16_partial(dst + i, load_lanes16_partial(src + i, n - i), n - i);
      return;
    }
  }
  for (; i < n; ++i) dst[i] = static_cast<Acc>(src[i]);
}

// load_run to float32 that also sets `seen` if a value is inf or NaN, checked in cache-sized
// chunks just after they are written.
template <class T>
inline void load_run(const T* src, float* dst, int64_t n, NonFiniteSeen* seen) {
  constexpr int64_t kChunk = 1024;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    load_run(src + i, dst + i, len);
    note_non_finite(seen, dst + i, len);
  }
}

// dst[i] = T(src[i]) for i < n, rounding to nearest even.
template <class Acc, class T>
inline void store_run(const Acc* src, T* dst, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<Acc, float>) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
  }
#endif
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
  if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<Acc, float>) {
    const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(src + i);
      const __m512i bits = _mm512_castps_si512(v);
      // vcvtneps2bf16 rounds to nearest even and quiets NaNs as hg::BFloat16 does, but flushes
      // float32 subnormals to zero: a block holding one takes the scalar loop.
      if (_mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, mantissa)) {
        for (int64_t j = i; j < i + 16; ++j) dst[j] = static_cast<T>(src[j]);
        continue;
      }
      const __m256bh rounded = _mm512_cvtneps_pbh(v);
      std::memcpy(static_cast<void*>(dst + i), &rounded, sizeof rounded);
    }
  }
#elif defined(__AVX512F__)
  if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<Acc, float>) {
    for (; i + kLanes16 <= n; i += kLanes16) {  // without AVX512_BF16: hg::BFloat16's rounding on 16 lanes
      const __m256i packed = pack_lanes16<BFloat16>(load_lanes16(src + i));
      std::memcpy(static_cast<void*>(dst + i), &packed, sizeof packed);
    }
  }
#endif
  if constexpr (kMaskedLanes16 && is_16bit_float<T> && std::is_same_v<Acc, float>) {
    if (i < n && n - i <= kLanes16) {  // the last values in one masked load and store
      store_lanes16_partial(dst + i, load_lanes16_partial(src + i, n - i), n - i);
      return;
    }
  }
  for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

// Rounds rows x cols float32 sums (row stride sums_ld) to T into out (row stride out_ld), adding
// bias[c] (float32, or none) to column c first: a GEMM's float32 tile stored once. With
// Out = float the rounded values are stored widened back to float32, and `seen` (when given) is
// set if any is inf or NaN.
template <class T, class Out>
void round_rows(float* sums, int64_t sums_ld, int64_t rows, int64_t cols, const float* bias, Out* out, int64_t out_ld,
                NonFiniteSeen* seen = nullptr) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = sums + r * sums_ld;
    if (bias != nullptr)
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    if constexpr (std::is_same_v<Out, T>) {
      store_run(row, out + r * out_ld, cols);
    } else {  // through a small 16-bit buffer: store_run and load_run are the vectorised conversions
      constexpr int64_t kChunk = 256;
      alignas(64) T rounded[kChunk];
      for (int64_t c = 0; c < cols; c += kChunk) {
        const int64_t len = std::min(kChunk, cols - c);
        store_run(row + c, rounded, len);
        load_run(rounded, out + r * out_ld + c, len);
        note_non_finite(seen, out + r * out_ld + c, len);
      }
    }
  }
}

}  // namespace hg::cpu
