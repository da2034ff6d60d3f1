// 8-bit float storage types, E4M3 ("fn": no infinities) and E5M2, with PyTorch's casts from
// float (round to nearest even) and Transformer Engine's saturating cast. Header-only and usable
// from CUDA device code, so the CPU and CUDA cast kernels give the same bits (docs/AMP.md, "fp8").
#pragma once

#include <cstdint>
#include <type_traits>

#include "framework/half.h"

namespace hg {

namespace detail {
// |x| (the float's bits without the sign; finite) rounded to nearest, ties to even, onto the grid
// of a format with kMant mantissa bits and exponent bias kBias, continued past the format's
// largest code: the result is the format's code for the rounded magnitude, or a larger number
// where the magnitude rounds beyond every code (the caller decides what overflow gives).
template <int kMant, int kBias>
HG_HOST_DEVICE inline uint32_t fp8_round_magnitude(uint32_t abs) {
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 - kBias + 1) << 23;
  if (abs >= kMinNormalBits) {
    // Rebias the exponent in place; the code is then the top bits, rounded on the dropped ones
    // (a carry out of the mantissa moves to the next binade, as it should).
    constexpr uint32_t kDrop = 23 - kMant;
    uint32_t r = abs - (static_cast<uint32_t>(127 - kBias) << 23);
    const uint32_t rem = r & ((1u << kDrop) - 1u);
    const uint32_t halfway = 1u << (kDrop - 1u);
    r >>= kDrop;
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return r;
  }
  // Below the smallest normal: count units of the smallest subnormal, 2^(1 - bias - mant). The
  // float is m * 2^(e - 150) with its implicit bit in m, so the count is m / 2^shift.
  const uint32_t e = abs >> 23;
  const uint32_t shift = static_cast<uint32_t>(151 - kBias - kMant) - e;
  if (e == 0 || shift > 24u) return 0;  // below half the smallest subnormal (or a tie at it: even)
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return r;  // rounding up from the largest subnormal gives the smallest normal's code
}
}  // namespace detail

// E4M3, the "fn" variant (PyTorch's float8_e4m3fn, OCP's E4M3): bias 7, no infinities, the largest
// finite value 448 (S.1111.110); S.1111.111 is NaN. A plain cast of a value that rounds beyond
// 448 (|x| > 464, infinities) gives NaN with the value's sign, as PyTorch's.
struct Float8E4M3 {
  uint8_t bits = 0;
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kMaxBits = 0x7e;
  static constexpr uint8_t kNaNBits = 0x7f;

  Float8E4M3() = default;
  HG_HOST_DEVICE Float8E4M3(float f) : bits(from_float(f)) {}
  HG_HOST_DEVICE operator float() const { return to_float(bits); }
  HG_HOST_DEVICE static Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v;
    v.bits = b;
    return v;
  }

  HG_HOST_DEVICE static float to_float(uint8_t b) {
    const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
    const uint32_t exp = (b >> 3) & 0xfu;
    const uint32_t mant = b & 0x7u;
    if (exp == 0xf && mant == 0x7) return detail::bits_float(sign | 0x7fc00000u);
    if (exp != 0) return detail::bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
    const float v = static_cast<float>(mant) * 0x1p-9f;  // subnormal (or zero): exact
    return sign ? -v : v;
  }

  HG_HOST_DEVICE static uint8_t from_float(float f) {
    const uint32_t x = detail::float_bits(f);
    const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return sign | kNaNBits;  // NaN, and infinity, which E4M3 lacks
    const uint32_t code = detail::fp8_round_magnitude<3, 7>(abs);
    return sign | static_cast<uint8_t>(code > kMaxBits ? kNaNBits : code);
  }

  // Transformer Engine's cast (cuda_fp8.h's __NV_SATFINITE): beyond the largest finite value,
  // infinities included, gives +-448; NaN stays NaN.
  HG_HOST_DEVICE static uint8_t from_float_saturate(float f) {
    const uint32_t x = detail::float_bits(f);
    const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | kNaNBits;
    if (abs == 0x7f800000u) return sign | kMaxBits;
    const uint32_t code = detail::fp8_round_magnitude<3, 7>(abs);
    return sign | static_cast<uint8_t>(code > kMaxBits ? kMaxBits : code);
  }
};

// E5M2 (PyTorch's float8_e5m2): bias 15, IEEE-like, the largest finite value 57344 (S.11110.11),
// infinities S.11111.00, NaN S.11111.{01,10,11}. A plain cast that rounds beyond 57344
// (|x| >= 61440) gives infinity; NaN gives S.11111.11, as PyTorch's.
struct Float8E5M2 {
  uint8_t bits = 0;
  static constexpr float kMax = 57344.0f;
  static constexpr uint8_t kMaxBits = 0x7b;
  static constexpr uint8_t kInfBits = 0x7c;
  static constexpr uint8_t kNaNBits = 0x7f;

  Float8E5M2() = default;
  HG_HOST_DEVICE Float8E5M2(float f) : bits(from_float(f)) {}
  HG_HOST_DEVICE operator float() const { return to_float(bits); }
  HG_HOST_DEVICE static Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }

  HG_HOST_DEVICE static float to_float(uint8_t b) {
    const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
    const uint32_t exp = (b >> 2) & 0x1fu;
    const uint32_t mant = b & 0x3u;
    if (exp == 0x1f) return detail::bits_float(sign | (mant == 0 ? 0x7f800000u : 0x7fc00000u));
    if (exp != 0) return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 21));
    const float v = static_cast<float>(mant) * 0x1p-16f;
    return sign ? -v : v;
  }

  HG_HOST_DEVICE static uint8_t from_float(float f) {
    const uint32_t x = detail::float_bits(f);
    const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | kNaNBits;
    if (abs == 0x7f800000u) return sign | kInfBits;
    const uint32_t code = detail::fp8_round_magnitude<2, 15>(abs);
    return sign | static_cast<uint8_t>(code > kMaxBits ? kInfBits : code);
  }

  HG_HOST_DEVICE static uint8_t from_float_saturate(float f) {
    const uint32_t x = detail::float_bits(f);
    const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | kNaNBits;
    if (abs == 0x7f800000u) return sign | kMaxBits;
    const uint32_t code = detail::fp8_round_magnitude<2, 15>(abs);
    return sign | static_cast<uint8_t>(code > kMaxBits ? kMaxBits : code);
  }
};

template <class T>
inline constexpr bool is_float8_v = std::is_same_v<T, Float8E4M3> || std::is_same_v<T, Float8E5M2>;

// The recipe's cast: x * scale rounded once (the product in float, as Transformer Engine's cast
// kernel forms it) and saturated to the format's largest finite value.
template <class F8>
HG_HOST_DEVICE inline F8 cast_to_float8_saturated(float x, float scale) {
  return F8::from_bits(F8::from_float_saturate(x * scale));
}

}  // namespace hg
