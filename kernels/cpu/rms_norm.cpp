// CPU rms_norm forward: a row at a time, the sum of squares in double (long rows of float32 or
// 16-bit values keep their precision, as layer_norm's), the scaling in float32 (float64) with
// one rounding.
#include <cmath>
#include <vector>

#include "framework/ops/rms_norm_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

void rms_norm_cpu(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps) {
  dispatch_floating(x.dtype(), "rms_norm", [&]<class T>(TypeTag<T>) {
    using Acc = acc_t<T>;
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    std::vector<Acc> w(static_cast<size_t>(cols), Acc(1));
    if (weight.defined()) {
      dispatch_floating(weight.dtype(), "rms_norm", [&]<class P>(TypeTag<P>) {
        const P* p = static_cast<const P*>(weight.raw_data());
        for (int64_t j = 0; j < cols; ++j) w[static_cast<size_t>(j)] = static_cast<Acc>(static_cast<acc_t<P>>(p[j]));
      });
    }
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(out.raw_data());
    Acc* rp = static_cast<Acc*>(rstd.raw_data());
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1));
    parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = xp + r * cols;
        double ss = 0;
        for (int64_t j = 0; j < cols; ++j) {
          const double v = static_cast<double>(static_cast<Acc>(xr[j]));
          ss += v * v;
        }
        const Acc inv = static_cast<Acc>(1.0 / std::sqrt(ss / static_cast<double>(cols) + eps));
        rp[r] = inv;
        T* yr = yp + r * cols;
        for (int64_t j = 0; j < cols; ++j)
          yr[j] = static_cast<T>(static_cast<Acc>(xr[j]) * inv * w[static_cast<size_t>(j)]);
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(rms_norm_stub, kCPU, rms_norm_cpu);

}  // namespace hg::cpu
