// Float16 and BFloat16 storage types with round-to-nearest-even conversions from float.
// Header-only and usable from CUDA device code, so CPU loops and kernels share one definition.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HG_HOST_DEVICE __host__ __device__
#else
#define HG_HOST_DEVICE
#endif

// On CPUs with F16C one float16 value converts in one instruction (the same rounding, bit for bit,
// as the portable code below, which a value takes otherwise: about a dozen integer instructions).
#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#define HG_HALF_F16C 1
#endif

namespace hg {

namespace detail {
HG_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
HG_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

// IEEE binary16. Conversions handle subnormals, infinities and NaN (NaN stays NaN).
struct Half {
  uint16_t bits = 0;

  Half() = default;
  HG_HOST_DEVICE Half(float f) : bits(from_float(f)) {}
  HG_HOST_DEVICE operator float() const { return to_float(bits); }
  HG_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }

  HG_HOST_DEVICE static float to_float(uint16_t h) {
#ifdef HG_HALF_F16C
    return _cvtsh_ss(h);
#else
    return to_float_portable(h);
#endif
  }

  HG_HOST_DEVICE static uint16_t from_float(float f) {
#ifdef HG_HALF_F16C
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return from_float_portable(f);
#endif
  }

  HG_HOST_DEVICE static float to_float_portable(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
    if (exp != 0) return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return detail::bits_float(sign);  // signed zero
    // Subnormal: value is mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }

  HG_HOST_DEVICE static uint16_t from_float_portable(float f) {
    const uint32_t x = detail::float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet and non-zero
      return sign | (abs > 0x7f800000u ? static_cast<uint16_t>(0x7e00u | ((abs >> 13) & 0x3ffu)) : 0x7c00u);
    }
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
    if (abs < 0x38800000u) {                        // below the smallest normal half (2^-14)
      if (abs < 0x33000000u) return sign;           // below half the smallest subnormal: zero
      // Subnormal result: shift the full mantissa into place, rounding to nearest even.
      const uint32_t e = abs >> 23;
      const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - e;  // 14..24
      uint32_t r = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1u);
      const uint32_t halfway = 1u << (shift - 1u);
      if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
      return sign | static_cast<uint16_t>(r);
    }
    // Normal: rebias exponent, round the 13 dropped bits to nearest even (carry may bump exp).
    uint32_t r = abs - 0x38000000u;
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  HG_HOST_DEVICE BFloat16(float f) : bits(from_float(f)) {}
  HG_HOST_DEVICE operator float() const { return to_float(bits); }
  HG_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }

  HG_HOST_DEVICE static float to_float(uint16_t b) { return detail::bits_float(static_cast<uint32_t>(b) << 16); }
  HG_HOST_DEVICE static uint16_t from_float(float f) {
    const uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>((x + rounding) >> 16);
  }
};

}  // namespace hg
