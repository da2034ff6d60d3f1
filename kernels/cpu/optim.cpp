// Fused CPU SGD and Adam/AdamW updates: one pass over each parameter that reads
// param, grad and the optimizer state once and writes them once, instead of the
// three to six tensor-op passes of the composed path. The arithmetic follows
// the composed path's order and scalar roundings (coefficients rounded once
// from double), so float32/float64 results agree with it to a few ulps (the
// compiler contracts multiply-adds into FMAs in different places in the two
// paths); 16-bit parameters are computed in float and rounded once.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/dispatch.h"
#include "framework/ops/optim_update_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

using optim::AdamHyper;
using optim::SgdHyper;

bool skipped(const Tensor& skip) { return skip.defined() && *skip.data_ptr<float>() != 0.0f; }

// Calls f(std::bool_constant<b>{}), so flags that are fixed for a whole update
// become template parameters and each inner loop is branch-free (and
// vectorises).
template <class F>
void with_flag(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Runs update(begin, end) over [0, n) on the pool. With cast_out defined (float32 params only),
// each block's new values are rounded into cast_out right after the block's update, while they
// are still in L1: the next autocast region's cast without another pass over the weights.
template <class T, class Update>
void update_and_cast(int64_t n, const T* param, const Tensor& cast_out, Update update) {
  if constexpr (std::is_same_v<T, float>) {
    if (cast_out.defined()) {
      constexpr int64_t kBlock = 2048;
      const auto run = [&]<class C>(C* out) {
        parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; b += kBlock) {
            const int64_t e = std::min(end, b + kBlock);
            update(b, e);
            store_run(param + b, out + b, e - b);
          }
        });
      };
      if (cast_out.dtype() == kFloat16) {
        run(static_cast<Half*>(cast_out.raw_data()));
      } else {
        run(static_cast<BFloat16*>(cast_out.raw_data()));
      }
      return;
    }
  }
  HG_CHECK(!cast_out.defined(), "optimizer", "a warm cast needs a float32 parameter, got {}", dtype_of<T>);
  parallel_for(n, kParallelGrain, update);
}

// A skipped step leaves the parameter as it is; cast_out still gets its rounded values.
void cast_unchanged(const Tensor& param, const Tensor& cast_out) {
  if (!cast_out.defined()) return;
  update_and_cast<float>(param.numel(), param.data_ptr<float>(), cast_out, [](int64_t, int64_t) {});
}

enum class Momentum { None, First, Blend };

template <class T, Momentum kMode, bool kWd, bool kNesterov>
void sgd_range(int64_t begin, int64_t end, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ buf,
               const SgdHyper& h) {
  using A = acc_t<T>;
  const A lr = static_cast<A>(h.lr), wd = static_cast<A>(h.weight_decay), mom = static_cast<A>(h.momentum);
  const A keep = static_cast<A>(1.0 - h.dampening);
  for (int64_t i = begin; i < end; ++i) {
    const A p = static_cast<A>(param[i]);
    A d = static_cast<A>(grad[i]);
    if constexpr (kWd) d = d + p * wd;
    if constexpr (kMode != Momentum::None) {
      // The first step copies d into the buffer (PyTorch's rule), later ones
      // blend it in.
      A b = d;
      if constexpr (kMode == Momentum::Blend) b = static_cast<A>(buf[i]) * mom + keep * d;
      buf[i] = static_cast<T>(b);
      if constexpr (kNesterov)
        d = d + b * mom;
      else
        d = b;
    }
    param[i] = static_cast<T>(p - lr * d);
  }
}

void sgd_update_cpu(const Tensor& param, const Tensor& grad, const Tensor& buf, const Tensor& ready, const Tensor& skip,
                    const Tensor& cast_out, const SgdHyper& h) {
  if (skipped(skip)) return cast_unchanged(param, cast_out);
  const int64_t n = param.numel();
  const Momentum mode = !buf.defined()                    ? Momentum::None
                        : *ready.data_ptr<int32_t>() == 0 ? Momentum::First
                                                          : Momentum::Blend;
  dispatch_floating(param.dtype(), "SGD", [&]<class T>(TypeTag<T>) {
    T* p = static_cast<T*>(param.raw_data());
    const T* g = static_cast<const T*>(grad.raw_data());
    T* b = buf.defined() ? static_cast<T*>(buf.raw_data()) : nullptr;
    with_flag(h.weight_decay != 0, [&](auto wd) {
      with_flag(h.nesterov && mode != Momentum::None, [&](auto nesterov) {
        auto run = [&](auto m) {
          update_and_cast(n, p, cast_out, [&](int64_t begin, int64_t end) {
            sgd_range<T, decltype(m)::value, decltype(wd)::value, decltype(nesterov)::value>(begin, end, p, g, b, h);
          });
        };
        switch (mode) {
          case Momentum::None: run(std::integral_constant<Momentum, Momentum::None>{}); break;
          case Momentum::First: run(std::integral_constant<Momentum, Momentum::First>{}); break;
          case Momentum::Blend: run(std::integral_constant<Momentum, Momentum::Blend>{}); break;
        }
      });
    });
  });
  if (buf.defined()) *ready.data_ptr<int32_t>() = 1;
}

template <class T, bool kWd, bool kDecoupled, bool kAmsgrad>
void adam_range(int64_t begin, int64_t end, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ m_,
                T* __restrict__ v_, T* __restrict__ vmax_, int64_t t, const AdamHyper& h) {
  using A = acc_t<T>;
  const double bias1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  const A bias2_sqrt = static_cast<A>(std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(t))));
  const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2);
  const A keep1 = static_cast<A>(1.0 - h.beta1), keep2 = static_cast<A>(1.0 - h.beta2);
  const A step_size = static_cast<A>(h.lr / bias1), eps = static_cast<A>(h.eps), wd = static_cast<A>(h.weight_decay);
  const A decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
  for (int64_t i = begin; i < end; ++i) {
    A p = static_cast<A>(param[i]);
    A g = static_cast<A>(grad[i]);
    if constexpr (kWd) {
      if constexpr (kDecoupled)
        p = p * decay;
      else
        g = g + p * wd;
    }
    const A m = static_cast<A>(m_[i]) * b1 + keep1 * g;
    const A v = static_cast<A>(v_[i]) * b2 + keep2 * (g * g);
    m_[i] = static_cast<T>(m);
    v_[i] = static_cast<T>(v);
    A second = v;
    if constexpr (kAmsgrad) {
      const A old = static_cast<A>(vmax_[i]);
      second = (old != old || old > v) ? old : v;  // maximum(): NaN propagates
      vmax_[i] = static_cast<T>(second);
    }
    const A denom = std::sqrt(second) / bias2_sqrt + eps;
    param[i] = static_cast<T>(p - step_size * (m / denom));
  }
}

void adam_update_cpu(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
                     const Tensor& step, const Tensor& skip, const Tensor& cast_out, const AdamHyper& h) {
  if (skipped(skip)) return cast_unchanged(param, cast_out);
  // The step advances first (skipped steps do not count), then the update reads
  // it.
  const int64_t t = ++*step.data_ptr<int64_t>();
  const int64_t n = param.numel();
  dispatch_floating(param.dtype(), "Adam", [&]<class T>(TypeTag<T>) {
    T* p = static_cast<T*>(param.raw_data());
    const T* g = static_cast<const T*>(grad.raw_data());
    T* pm = static_cast<T*>(m.raw_data());
    T* pv = static_cast<T*>(v.raw_data());
    T* pvmax = vmax.defined() ? static_cast<T*>(vmax.raw_data()) : nullptr;
    with_flag(h.weight_decay != 0, [&](auto wd) {
      with_flag(h.decoupled, [&](auto decoupled) {
        with_flag(pvmax != nullptr, [&](auto amsgrad) {
          update_and_cast(n, p, cast_out, [&](int64_t begin, int64_t end) {
            adam_range<T, decltype(wd)::value, decltype(decoupled)::value, decltype(amsgrad)::value>(
                begin, end, p, g, pm, pv, pvmax, t, h);
          });
        });
      });
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(optim::sgd_update_stub, kCPU, sgd_update_cpu);
HG_REGISTER_KERNEL(optim::adam_update_stub, kCPU, adam_update_cpu);

}  // namespace hg::cpu
