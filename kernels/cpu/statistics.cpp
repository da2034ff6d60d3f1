// CPU var and norm over the rows of a contiguous [rows, n] tensor, accumulating in float64.
#include <algorithm>
#include <cmath>

#include "framework/ops/statistics_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

template <class T>
T round_to(double v) {
  return static_cast<T>(static_cast<acc_t<T>>(v));
}

template <class T>
void var_typed(const Tensor& out, const Tensor& in, double correction) {
  const int64_t rows = in.shape()[0], n = in.shape()[1];
  const T* data = static_cast<const T*>(in.raw_data());
  T* dst = static_cast<T*>(out.raw_data());
  const double denom = std::max(static_cast<double>(n) - correction, 0.0);
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = data + r * n;
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(static_cast<acc_t<T>>(row[i]));
      const double m = s / static_cast<double>(n);
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(static_cast<acc_t<T>>(row[i])) - m;
        ss += d * d;
      }
      dst[r] = round_to<T>(ss / denom);
    }
  });
}

template <class T, class O>
void norm_typed(const Tensor& out, const Tensor& in, double p) {
  const int64_t rows = in.shape()[0], n = in.shape()[1];
  const T* data = static_cast<const T*>(in.raw_data());
  O* dst = static_cast<O*>(out.raw_data());
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = data + r * n;
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double a = std::abs(static_cast<double>(static_cast<acc_t<T>>(row[i])));
        if (p == 1.0) {
          acc += a;
        } else if (p == 2.0) {
          acc += a * a;
        } else if (a != a || a > acc) {  // infinity norm; NaN wins
          acc = a;
        }
        if (acc != acc) break;
      }
      dst[r] = round_to<O>(p == 2.0 ? std::sqrt(acc) : acc);
    }
  });
}

void var_cpu(const Tensor& out, const Tensor& in, double correction) {
  dispatch_floating(in.dtype(), "var", [&]<class T>(TypeTag<T>) { var_typed<T>(out, in, correction); });
}

void norm_cpu(const Tensor& out, const Tensor& in, double p) {
  dispatch_floating(in.dtype(), "norm", [&]<class T>(TypeTag<T>) {
    dispatch_floating(out.dtype(), "norm", [&]<class O>(TypeTag<O>) { norm_typed<T, O>(out, in, p); });
  });
}

}  // namespace

HG_REGISTER_KERNEL(var_stub, kCPU, var_cpu);
HG_REGISTER_KERNEL(norm_stub, kCPU, norm_cpu);

}  // namespace hg::cpu
