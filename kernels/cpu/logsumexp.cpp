// CPU logsumexp: one row at a time, the max shift then the vector exp's sum (rows.h), as softmax.
#include <cmath>
#include <limits>

#include "framework/ops/logsumexp_kernels.h"
#include "kernels/cpu/rows.h"

namespace hg::cpu {
namespace {

void logsumexp_cpu(const Tensor& out, const Tensor& in) {
  dispatch_float(in.dtype(), [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const int64_t outer = in.shape()[0], n = in.shape()[1], inner = in.shape()[2];
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    for_each_row(outer, n, inner, [&](int64_t row, int64_t base, auto stride) {
      C m = row_max<C>(x + base, n, stride);  // NaN propagates
      // An infinite max shifts by 0, as PyTorch: -inf rows give log(0) = -inf, +inf rows +inf.
      if (std::isinf(m)) m = 0;
      const C s = row_exps(x + base, n, stride, m).sum;
      y[row] = static_cast<T>(m + std::log(s));
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(logsumexp_stub, kCPU, logsumexp_cpu);

}  // namespace hg::cpu
