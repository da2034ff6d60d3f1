// CPU copy with dtype conversion, and fill.
#include <cstdint>
#include <type_traits>

#include "framework/ops/copy_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"

namespace hg::cpu {
namespace {

// A float to integer cast of NaN or of a value outside the target's range is undefined
// behaviour in C++ (clang's UBSan reports it; a corrupt checkpoint can hold such values). Go
// through int64 instead: NaN becomes 0, values beyond int64 saturate, and narrower integer types
// then wrap as C++20 defines (the result x86 builds of PyTorch give for in-range values).
inline int64_t float_to_int64(double d) {
  if (d != d) return 0;
  if (d >= 0x1p63) return INT64_MAX;
  if (d <= -0x1p63) return INT64_MIN;
  return static_cast<int64_t>(d);
}

// The 16-bit and 8-bit floats convert through float (exact when widening; one rounding, to
// nearest even, when narrowing from float32 or a 16-bit float).
template <class T>
inline constexpr bool is_narrow_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || is_float8_v<T>;

template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  } else if constexpr (is_narrow_float<To>) {
    if constexpr (std::is_same_v<From, double>) {
      return To(static_cast<float>(v));  // note: double->float->half may double-round (as PyTorch's)
    } else {
      return To(static_cast<float>(v));
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return static_cast<To>(float_to_int64(static_cast<double>(v)));
  } else if constexpr (std::is_integral_v<To> && is_narrow_float<From>) {
    return static_cast<To>(float_to_int64(static_cast<double>(static_cast<float>(v))));
  } else if constexpr (is_narrow_float<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// float32 <-> float16/bfloat16, the casts autocast makes on every step: contiguous runs go
// through the bulk conversions (F16C for float16, 8 or 16 values per instruction), which give
// the same round-to-nearest-even and NaN results as the element-wise convert.
template <class To, class From>
void convert_float_runs(const Tensor& dst, const Tensor& src) {
  for_each_run<2>(dst.shape(), {&dst, &src},
                  [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                    auto* o = reinterpret_cast<To*>(p[0]);
                    const auto* a = reinterpret_cast<const From*>(p[1]);
                    if (s[0] == sizeof(To) && s[1] == sizeof(From)) {
                      if constexpr (std::is_same_v<From, float>) {
                        store_run(a, o, n);
                      } else {
                        load_run(a, o, n);
                      }
                    } else {
                      for (int64_t i = 0; i < n; ++i) {
                        *reinterpret_cast<To*>(p[0] + i * s[0]) =
                            convert<To, From>(*reinterpret_cast<const From*>(p[1] + i * s[1]));
                      }
                    }
                  });
}

void copy_cpu(const Tensor& dst, const Tensor& src) {
  dispatch_any_dtype(dst.dtype(), [&]<class To>(TypeTag<To>) {
    dispatch_any_dtype(src.dtype(), [&]<class From>(TypeTag<From>) {
      if constexpr ((is_16bit_float<To> && std::is_same_v<From, float>) ||
                    (std::is_same_v<To, float> && is_16bit_float<From>)) {
        convert_float_runs<To, From>(dst, src);
      } else {
        unary_loop<To, From>(dst, src, [](From v) { return convert<To, From>(v); });
      }
    });
  });
}

// The widening of a 16-bit gradient to float32 (the backward of autocast's cast of a float32
// tensor), noting whether every value is finite: each 4 KiB of output is checked in L1 just
// after it is written, so the pass still reads and writes memory once.
bool widen_noting_finite_cpu(const Tensor& dst, const Tensor& src) {
  NonFiniteSeen seen{false};
  auto* out = dst.data_ptr<float>();
  const auto run = [&]<class From>(const From* in) {
    parallel_for(dst.numel(), kParallelGrain,
                 [&](int64_t begin, int64_t end) { load_run(in + begin, out + begin, end - begin, &seen); });
  };
  if (src.dtype() == kFloat16)
    run(static_cast<const Half*>(src.raw_data()));
  else
    run(static_cast<const BFloat16*>(src.raw_data()));
  return !seen.load();
}

void fill_cpu(const Tensor& dst, double value) {
  dispatch_any_dtype(dst.dtype(), [&]<class T>(TypeTag<T>) {
    const T v = convert<T, double>(value);
    for_each_run<1>(dst.shape(), {&dst},
                    [&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(copy_stub, kCPU, copy_cpu);
HG_REGISTER_KERNEL(widen_noting_finite_stub, kCPU, widen_noting_finite_cpu);
HG_REGISTER_KERNEL(fill_stub, kCPU, fill_cpu);

}  // namespace hg::cpu
