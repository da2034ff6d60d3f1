// CPU softmax / log_softmax, forward and backward, one row at a time.
#include <cmath>
#include <limits>

#include "framework/ops/softmax_kernels.h"
#include "kernels/cpu/rows.h"

namespace hg::cpu {
namespace {

// Reads In, computes in C (float, or double for float64 output), writes Out.
template <class In, class Out, class C>
void softmax_typed(const Tensor& out, const Tensor& in, bool log) {
  const int64_t outer = in.shape()[0], n = in.shape()[1], inner = in.shape()[2];
  const In* x = static_cast<const In*>(in.raw_data());
  Out* y = static_cast<Out*>(out.raw_data());
  for_each_row(outer, n, inner, [&](int64_t, int64_t base, auto stride) {
    const In* xr = x + base;
    Out* yr = y + base;
    const C m = row_max<C>(xr, n, stride);  // NaN propagates to the whole row
    // An all -inf row gives NaN, as PyTorch (exp(-inf - -inf)). Each exp is computed once and
    // kept for the scaling.
    const auto [e, s] = row_exps(xr, n, stride, m);
    if (log) {
      const C lse = m + std::log(s);
      for (int64_t i = 0; i < n; ++i) yr[i * stride] = static_cast<Out>(static_cast<C>(xr[i * stride]) - lse);
    } else {
      const C inv = C(1) / s;
      for (int64_t i = 0; i < n; ++i) yr[i * stride] = static_cast<Out>(e[i] * inv);
    }
  });
}

void softmax_cpu(const Tensor& out, const Tensor& in, bool log) {
  dispatch_float(in.dtype(), [&]<class In>(TypeTag<In>) {
    dispatch_float(out.dtype(), [&]<class Out>(TypeTag<Out>) {
      using C = std::conditional_t<std::is_same_v<Out, double>, double, float>;
      softmax_typed<In, Out, C>(out, in, log);
    });
  });
}

void softmax_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y_t, bool log) {
  dispatch_float(y_t.dtype(), [&]<class T>(TypeTag<T>) {
    using C = acc_t<T>;
    const int64_t outer = y_t.shape()[0], n = y_t.shape()[1], inner = y_t.shape()[2];
    const T* g = static_cast<const T*>(grad_out.raw_data());
    const T* y = static_cast<const T*>(y_t.raw_data());
    T* gx = static_cast<T*>(grad_in.raw_data());
    for_each_row(outer, n, inner, [&](int64_t, int64_t base, auto stride) {
      C s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = base + i * stride;
        s += log ? static_cast<C>(g[k]) : static_cast<C>(g[k]) * static_cast<C>(y[k]);
      }
      if (log) {  // the probabilities exp(y)
        const C* p = row_exps(y + base, n, stride, C(0)).exps;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = base + i * stride;
          gx[k] = static_cast<T>(static_cast<C>(g[k]) - p[i] * s);
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = base + i * stride;
        const C gk = static_cast<C>(g[k]), yk = static_cast<C>(y[k]);
        gx[k] = static_cast<T>(yk * (gk - s));
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(softmax_stub, kCPU, softmax_cpu);
HG_REGISTER_KERNEL(softmax_backward_stub, kCPU, softmax_backward_cpu);

}  // namespace hg::cpu
