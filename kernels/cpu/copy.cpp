// CPU copy with dtype conversion, and fill.
#include "framework/ops/copy_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      return To(static_cast<float>(v));  // note: double->float->half may double-round
    } else {
      return To(static_cast<float>(v));
    }
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

void copy_cpu(const Tensor& dst, const Tensor& src) {
  dispatch_dtype(dst.dtype(), [&]<class To>(TypeTag<To>) {
    dispatch_dtype(src.dtype(), [&]<class From>(TypeTag<From>) {
      unary_loop<To, From>(dst, src, [](From v) { return convert<To, From>(v); });
    });
  });
}

void fill_cpu(const Tensor& dst, double value) {
  dispatch_dtype(dst.dtype(), [&]<class T>(TypeTag<T>) {
    const T v = convert<T, double>(value);
    for_each_run<1>(dst.shape(), {&dst},
                    [&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(copy_stub, kCPU, copy_cpu);
HG_REGISTER_KERNEL(fill_stub, kCPU, fill_cpu);

}  // namespace hg::cpu
