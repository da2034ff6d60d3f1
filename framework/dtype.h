// Element types, their sizes and names, and PyTorch's type-promotion rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "framework/float8.h"
#include "framework/half.h"

namespace hg {

// The two float8 dtypes are storage and cast types (framework/float8.h): to() converts to and from
// them, views and copies take them, and the generic arithmetic kernels refuse them by name.
enum class Dtype : uint8_t { Float32, Float16, BFloat16, Float64, Int64, Int32, UInt8, Bool, Float8E4M3, Float8E5M2 };

inline constexpr Dtype kFloat32 = Dtype::Float32;
inline constexpr Dtype kFloat16 = Dtype::Float16;
inline constexpr Dtype kBFloat16 = Dtype::BFloat16;
inline constexpr Dtype kFloat64 = Dtype::Float64;
inline constexpr Dtype kInt64 = Dtype::Int64;
inline constexpr Dtype kInt32 = Dtype::Int32;
inline constexpr Dtype kUInt8 = Dtype::UInt8;
inline constexpr Dtype kBool = Dtype::Bool;
inline constexpr Dtype kFloat8E4M3 = Dtype::Float8E4M3;  // PyTorch's float8_e4m3fn
inline constexpr Dtype kFloat8E5M2 = Dtype::Float8E5M2;

inline constexpr Dtype kAllDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64,    kInt64,
                                       kInt32,   kUInt8,   kBool,     kFloat8E4M3, kFloat8E5M2};

size_t element_size(Dtype dtype);
std::string_view dtype_name(Dtype dtype);  // "float32", "bfloat16", "float8_e4m3fn", ...
bool is_floating(Dtype dtype);             // true for the float8 dtypes too, as in PyTorch
inline bool is_float8(Dtype dtype) { return dtype == kFloat8E4M3 || dtype == kFloat8E5M2; }
inline bool is_reduced_float(Dtype dtype) { return dtype == kFloat16 || dtype == kBFloat16; }
// The dtype PyTorch gives a binary op of tensors a and b (float16 with bfloat16 gives float32).
// A float8 dtype promotes only with itself; with any other it throws, as PyTorch's.
Dtype promote_types(Dtype a, Dtype b);

// C++ type <-> Dtype.
template <class T>
struct DtypeOf;
template <>
struct DtypeOf<float> {
  static constexpr Dtype value = kFloat32;
};
template <>
struct DtypeOf<Half> {
  static constexpr Dtype value = kFloat16;
};
template <>
struct DtypeOf<BFloat16> {
  static constexpr Dtype value = kBFloat16;
};
template <>
struct DtypeOf<double> {
  static constexpr Dtype value = kFloat64;
};
template <>
struct DtypeOf<int64_t> {
  static constexpr Dtype value = kInt64;
};
template <>
struct DtypeOf<int32_t> {
  static constexpr Dtype value = kInt32;
};
template <>
struct DtypeOf<uint8_t> {
  static constexpr Dtype value = kUInt8;
};
template <>
struct DtypeOf<bool> {
  static constexpr Dtype value = kBool;
};
template <>
struct DtypeOf<Float8E4M3> {
  static constexpr Dtype value = kFloat8E4M3;
};
template <>
struct DtypeOf<Float8E5M2> {
  static constexpr Dtype value = kFloat8E5M2;
};
template <class T>
inline constexpr Dtype dtype_of = DtypeOf<T>::value;

// The type arithmetic on T is done in: float for the 16-bit floats, T otherwise.
template <class T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};
template <>
struct AccType<Float8E4M3> {
  using type = float;
};
template <>
struct AccType<Float8E5M2> {
  using type = float;
};
template <class T>
using acc_t = typename AccType<T>::type;

}  // namespace hg

template <>
struct fmt::formatter<hg::Dtype> : fmt::formatter<std::string_view> {
  auto format(hg::Dtype d, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(hg::dtype_name(d), ctx);
  }
};
