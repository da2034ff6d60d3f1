// 16 float32 lanes for the hand-blocked GEMM kernels (narrow_gemm, short_inner_gemm): one
// AVX-512 register (two AVX ones elsewhere), written with GCC's vector extension so blocks of
// accumulators stay in registers. Loading widens float16/bfloat16 storage in registers and
// storing rounds in registers, with the same results as hg::Half and hg::BFloat16: the values
// never pass through a float32 buffer (a 64-byte vector stored and reloaded in halves stalls on
// store forwarding).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "framework/half.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace hg::cpu {

using Lanes16 = float __attribute__((vector_size(64)));
inline constexpr int64_t kLanes16 = 16;

// Streaming loops bound by memory prefetch each input stream this far ahead (in floats: 2 KiB),
// which keeps more loads in flight than the hardware prefetchers alone when each step also
// does some arithmetic (the fused optimizer updates, the GradScaler's unscale).
inline constexpr int64_t kPrefetchAhead = 512;

inline void prefetch_ahead(const float* p) {
#if defined(__SSE__)
  _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead), _MM_HINT_T0);  // never faults
#else
  (void)p;
#endif
}

// The 16 values at p (float, BFloat16 or Half), as float32.
template <class T>
inline Lanes16 load_lanes16(const T* p) {
  Lanes16 v;
#ifdef __AVX512F__
  // (the maskz forms: gcc 12 warns about the unmasked ones' undefined pass-through)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 x = _mm512_loadu_ps(p);
    std::memcpy(&v, &x, sizeof v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {  // a bfloat16 is the top half of a float32
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i x = _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16);
    std::memcpy(&v, &x, sizeof v);
  } else {
    const __m512 x = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&v, &x, sizeof v);
  }
#elif defined(__AVX2__) && defined(__F16C__)
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(&v, p, sizeof v);
  } else {
    __m256 half[2];
    for (int h = 0; h < 2; ++h) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * h));
      if constexpr (std::is_same_v<T, BFloat16>) {
        half[h] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
      } else {
        half[h] = _mm256_cvtph_ps(x);
      }
    }
    std::memcpy(&v, half, sizeof v);
  }
#else
  for (int64_t i = 0; i < kLanes16; ++i) v[i] = static_cast<float>(p[i]);
#endif
  return v;
}

// The 32 bfloat16 values at p split by position, as float32: even[i] = p[2i], odd[i] = p[2i + 1].
// One load and two bit operations for 32 values, where load_lanes16 takes a load, a widening
// move and a shift for 16: each 32-bit word of the load holds an even value in its low half and
// the next odd one in its high half, and a bfloat16 is the high half of its float32. For sums
// over the 32 positions in any order (a dot product whose other operand is split the same way).
inline void load_bf16_pairs(const BFloat16* p, Lanes16& even, Lanes16& odd) {
#ifdef __AVX512F__
  const __m512i words = _mm512_loadu_si512(p);
  const __m512i e = _mm512_maskz_slli_epi32(0xffff, words, 16);
  const __m512i o = _mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  std::memcpy(&even, &e, sizeof even);
  std::memcpy(&odd, &o, sizeof odd);
#else
  for (int64_t i = 0; i < kLanes16; ++i) {
    even[i] = static_cast<float>(p[2 * i]);
    odd[i] = static_cast<float>(p[2 * i + 1]);
  }
#endif
}

// load_bf16_pairs of the first `count` (at most 32) values at p, the values past them zero.
inline void load_bf16_pairs_partial(const BFloat16* p, int64_t count, Lanes16& even, Lanes16& odd) {
  BFloat16 padded[2 * kLanes16] = {};
  std::memcpy(padded, p, static_cast<size_t>(count) * sizeof(BFloat16));
  load_bf16_pairs(padded, even, odd);
}

// Whether the partial loads and stores below take one masked vector instruction (AVX512BW/VL's
// 16-bit masks) rather than a copy through a padded buffer.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
inline constexpr bool kMaskedLanes16 = true;
inline __mmask16 lanes16_mask(int64_t count) { return static_cast<__mmask16>((uint32_t{1} << count) - 1); }
#else
inline constexpr bool kMaskedLanes16 = false;
#endif

// The first `count` (at most 16) values at p as float32, the other lanes zero: one masked load
// where the CPU has 16-bit masks, else copied next to zeros and widened as a whole vector (a
// 16-bit value converted alone takes a dozen integer instructions). Nothing past count is read.
template <class T>
inline Lanes16 load_lanes16_partial(const T* p, int64_t count) {
  if (count == kLanes16) return load_lanes16(p);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const __mmask16 m = lanes16_mask(count);
  __m512 x;
  if constexpr (std::is_same_v<T, float>) {
    x = _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if constexpr (std::is_same_v<T, BFloat16>) {
      x = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, h), 16));
    } else {
      x = _mm512_maskz_cvtph_ps(m, h);
    }
  }
  Lanes16 v;
  std::memcpy(&v, &x, sizeof v);
  return v;
#else
  T padded[kLanes16] = {};
  std::memcpy(padded, p, static_cast<size_t>(count) * sizeof(T));
  return load_lanes16(padded);
#endif
}

#ifdef __AVX512F__
// The 16 lanes rounded to nearest even as T (BFloat16 or Half), packed in 32 bytes.
template <class T>
inline __m256i pack_lanes16(Lanes16 v) {
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  if constexpr (std::is_same_v<T, BFloat16>) {
    // hg::BFloat16's rounding on the bits (vcvtneps2bf16 would flush float32 subnormals):
    // a NaN keeps its top half with the quiet bit set; others add 0x7fff plus the kept lowest
    // bit and drop the low half.
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i high = _mm512_maskz_srli_epi32(0xffff, bits, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i result = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    return _mm512_maskz_cvtepi32_epi16(0xffff, result);
  } else {
    static_assert(std::is_same_v<T, Half>);
    return _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
#endif

// dst[i] = T(v[i]) for the 16 lanes, rounding to nearest even.
template <class T>
inline void store_lanes16(T* dst, Lanes16 v) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, &v, sizeof v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), pack_lanes16<T>(v));
  }
#else
  for (int64_t i = 0; i < kLanes16; ++i) dst[i] = static_cast<T>(v[i]);
#endif
}

// store_lanes16 of the first `count` (at most 16) lanes only; nothing past them is written.
template <class T>
inline void store_lanes16_partial(T* dst, Lanes16 v, int64_t count) {
  if (count == kLanes16) return store_lanes16(dst, v);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if constexpr (std::is_same_v<T, float>) {
    __m512 x;
    std::memcpy(&x, &v, sizeof x);
    _mm512_mask_storeu_ps(dst, lanes16_mask(count), x);
  } else {
    _mm256_mask_storeu_epi16(static_cast<void*>(dst), lanes16_mask(count), pack_lanes16<T>(v));
  }
#else
  T rounded[kLanes16];
  store_lanes16(rounded, v);
  std::memcpy(static_cast<void*>(dst), rounded, static_cast<size_t>(count) * sizeof(T));
#endif
}

// store_lanes16 of 16-bit values to a 32-byte-aligned dst with a streaming store, which skips
// reading the destination line into the cache first (for outputs read again only after the
// cache has turned over); the caller orders these stores with stream_fence() when done.
template <class T>
inline void stream_lanes16(T* dst, Lanes16 v) {
#ifdef __AVX512F__
  _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), pack_lanes16<T>(v));
#else
  store_lanes16(dst, v);
#endif
}

// Each lane rounded to T (as store_lanes16 rounds) and widened back to float32, in registers.
template <class T>
inline Lanes16 round_lanes16(Lanes16 v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
#ifdef __AVX512F__
    __m512 x;
    std::memcpy(&x, &v, sizeof x);
    __m512 r;
    if constexpr (std::is_same_v<T, BFloat16>) {
      // The bfloat16 rounding on the bits, keeping the result in the top half: a NaN gets its
      // quiet bit, others add 0x7fff plus the kept lowest bit; then the low half is cleared.
      const __m512i bits = _mm512_castps_si512(x);
      const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, bits, 16), _mm512_set1_epi32(1));
      const __m512i sum = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
      const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      const __m512i kept = _mm512_mask_or_epi32(sum, nan, bits, _mm512_set1_epi32(0x00400000));
      r = _mm512_castsi512_ps(_mm512_and_si512(kept, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    } else {
      r = _mm512_maskz_cvtph_ps(0xffff,
                                _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    Lanes16 out;
    std::memcpy(&out, &r, sizeof out);
    return out;
#else
    Lanes16 out;
    for (int64_t i = 0; i < kLanes16; ++i) out[i] = static_cast<float>(static_cast<T>(v[i]));
    return out;
#endif
  }
}

// dst[i] = float(T(v[i])): each lane rounded to T and stored widened to float32, what storing T
// values and widening them gives, without the 16-bit copy.
template <class T>
inline void store_lanes16_widened(float* dst, Lanes16 v) {
  const Lanes16 r = round_lanes16<T>(v);
  std::memcpy(dst, &r, sizeof r);
}

// Kernels that write float32 results can say whether any was inf or NaN, found from the
// registers the results pass through or from cache just after they are stored (the widened
// weight gradient, for GradScaler::step: see internal::note_all_finite). Set, relaxed, by any thread that saw one; read
// after the kernel. A lane that is never stored (padding) may set it too: that only costs a check later.
using NonFiniteSeen = std::atomic<bool>;

// Whether any lane is inf or NaN (v - v is NaN exactly then).
inline bool any_non_finite(Lanes16 v) {
  const Lanes16 d = v - v;
#ifdef __AVX512F__
  __m512 x;
  std::memcpy(&x, &d, sizeof x);
  return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0;
#else
  for (int64_t i = 0; i < kLanes16; ++i)
    if (d[i] != d[i]) return true;
  return false;
#endif
}

inline void note_non_finite(NonFiniteSeen* seen, Lanes16 v) {
  if (seen != nullptr && any_non_finite(v)) seen->store(true, std::memory_order_relaxed);
}
inline void note_non_finite(NonFiniteSeen* seen, float v) {
  if (seen != nullptr && !std::isfinite(v)) seen->store(true, std::memory_order_relaxed);
}
// Over n float32 values just written (still in cache).
inline void note_non_finite(NonFiniteSeen* seen, const float* p, int64_t n) {
  if (seen == nullptr) return;
  int64_t i = 0;
  for (; i + kLanes16 <= n; i += kLanes16) {
    Lanes16 v;
    std::memcpy(&v, p + i, sizeof v);
    note_non_finite(seen, v);
  }
  for (; i < n; ++i) note_non_finite(seen, p[i]);
}

// The sum of the 16 lanes, in a fixed order: halves added pairwise (lane i + lane i + 8, then
// i + 4, ...), four vector adds where a lane-by-lane sum is a chain of fifteen dependent scalar
// ones with an extract before each (a third of narrow_gemm's dot products' time at k = 784).
inline float lanes16_sum(Lanes16 v) {
  using Lanes8 = float __attribute__((vector_size(32)));
  using Lanes4 = float __attribute__((vector_size(16)));
  const Lanes8 s8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                    __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Lanes4 s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  const float s0 = s4[0] + s4[2], s1 = s4[1] + s4[3];
  return s0 + s1;
}

}  // namespace hg::cpu
