// Bulk conversions between storage types and the float32 that kernels compute in. float16 uses
// the F16C instructions where the build targets them (8 values per instruction, the same round-
// to-nearest-even and NaN results as hg::Half); everything else is a plain loop the compiler
// vectorises.
#pragma once

#include <cstdint>
#include <type_traits>

#include "framework/half.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace hg::cpu {

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
  for (; i < n; ++i) dst[i] = static_cast<Acc>(src[i]);
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
  for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

}  // namespace hg::cpu
