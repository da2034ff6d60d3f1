// A floating type's bits as an unsigned integer of its width, with the masks that select and
// test on them. Kernels that move floats by their bits (the 2x2 pools' backward) use it, since GCC
// vectorises selects on integers where it made branches on float values.
#pragma once

#include <cstdint>
#include <type_traits>

#include "framework/half.h"

namespace hg::cpu {

template <class T>
struct FloatBits {
  using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static constexpr int kBits = 8 * sizeof(T);
  static constexpr int kMantissa = std::is_same_v<T, BFloat16> ? 7
                                   : std::is_same_v<T, Half>   ? 10
                                   : sizeof(T) == 4            ? 23
                                                               : 52;
  static constexpr U kSign = U(U(1) << (kBits - 1));
  static constexpr U kInf = U(kSign - (U(1) << kMantissa));  // exponent all ones, mantissa 0
  static constexpr U kQuiet = U(U(1) << (kMantissa - 1));
  static constexpr U kMantissaMask = U((U(1) << kMantissa) - 1);
  // 0 + g on the bits: -0 becomes +0 and a signalling NaN is quietened; anything else is g.
  static U plus_zero(U g) {
    const bool nan = U(g & kInf) == kInf && U(g & kMantissaMask) != 0;
    return g == kSign ? U(0) : nan ? U(g | kQuiet) : g;
  }
  // v > 0: sign clear, not zero, not NaN (infinity is positive).
  static bool positive(U v) { return v != 0 && v <= kInf; }
};

}  // namespace hg::cpu
