// Fused CPU SGD and Adam/AdamW updates: one pass over each parameter that reads
// param, grad and the optimizer state once and writes them once, instead of the
// three to six tensor-op passes of the composed path. The arithmetic follows
// the composed path's order and scalar roundings (coefficients rounded once
// from double), so float32/float64 results agree with it to a few ulps (the
// compiler contracts multiply-adds into FMAs in different places in the two
// paths); 16-bit parameters are computed in float and rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "framework/dispatch.h"
#include "framework/ops/optim_update_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/lanes16.h"
#include "kernels/cpu/stream_store.h"

namespace hg::cpu {
namespace {

using optim::AdamHyper;
using optim::SgdHyper;

bool skipped(const Tensor& skip) { return skip.defined() && *skip.data_ptr<float>() != 0.0f; }

// Calls f(std::bool_constant<b>{}), so flags that are fixed for a whole update
// become template parameters and each inner loop is branch-free.
template <class F>
void with_flag(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// ---- float32 parameters: 16 values at a time, the warm cast written from registers ----

// No low-precision copy to write.
struct NoCopy {};

// f(copy) with cast_out's data as BFloat16* or Half*, or a NoCopy* when it is undefined.
template <class F>
void with_copy(const Tensor& cast_out, F&& f) {
  if (!cast_out.defined()) return f(static_cast<NoCopy*>(nullptr));
  if (cast_out.dtype() == kFloat16) return f(static_cast<Half*>(cast_out.raw_data()));
  HG_CHECK(cast_out.dtype() == kBFloat16, "optimizer", "a warm cast is bfloat16 or float16, got {}", cast_out.dtype());
  f(static_cast<BFloat16*>(cast_out.raw_data()));
}

// Runs a float32 update over [begin, end): vector(i) updates values [i, i + 16) and returns
// their new parameter values, scalar(i) updates value i and returns it. Both must apply the
// same rule (the tests check the lanes and the scalar ends agree bit for bit). With a copy, the
// new values are also rounded into it, from the register: the next autocast region's cast with
// no pass of its own. The copy is read only by the next step's forward; when the update moves
// half the last-level cache or more (16 bytes a value at least), it would be evicted before
// then, so it is written with streaming stores, which skip reading each destination line first
// (wide_mlp fp16, batch 16: 88.7-90.0 -> 85.4-86.4 ms a step; a small MLP's copies stay cached).
// The vector steps prefetch each stream they read (prefetch_ahead): without it the update with a
// 16-bit copy ran 18% slower than without one, the rounding's arithmetic leaving fewer loads in
// flight (4 x 4096 x 4096 weights, SGD with momentum, 2 threads: 25.8 -> 25.1 ms without a
// copy, 30.7 -> 27.7 ms with a bfloat16 one).
template <class C, class Vector, class Scalar>
void float_update_loop(int64_t begin, int64_t end, C* copy, bool stream, Vector&& vector, Scalar&& scalar) {
  constexpr bool kCopy = !std::is_same_v<C, NoCopy>;
  const auto one = [&](int64_t i) {
    const float value = scalar(i);
    if constexpr (kCopy) copy[i] = static_cast<C>(value);
  };
  int64_t i = begin;
  if (kCopy && stream)  // streaming stores of 16 values want a 32-byte-aligned destination
    for (; i < end && i % kLanes16 != 0; ++i) one(i);
  for (; i + kLanes16 <= end; i += kLanes16) {
    const Lanes16 value = vector(i);
    if constexpr (kCopy) {
      if (stream)
        stream_lanes16(copy + i, value);
      else
        store_lanes16(copy + i, value);
    }
  }
  for (; i < end; ++i) one(i);
  if (kCopy && stream) stream_fence();
}

// Runs body(copy, stream) over the pool for a float32 parameter of n values and its warm cast.
template <class Body>
void float_update(int64_t n, const Tensor& cast_out, Body&& body) {
  with_copy(cast_out, [&]<class C>(C* copy) {
    // (a copy not on a 32-byte boundary, which the allocator never hands out, takes plain stores)
    const bool stream = n * 16 >= last_level_cache_bytes() / 2 && reinterpret_cast<uintptr_t>(copy) % 32 == 0;
    parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) { body(begin, end, copy, stream); });
  });
}

// A skipped step leaves the parameter as it is; cast_out still gets its rounded values.
void cast_unchanged(const Tensor& param, const Tensor& cast_out) {
  if (!cast_out.defined()) return;
  float* p = param.data_ptr<float>();
  float_update(param.numel(), cast_out, [&](int64_t begin, int64_t end, auto* copy, bool stream) {
    float_update_loop(
        begin, end, copy, stream, [&](int64_t i) { return load_lanes16(p + i); }, [&](int64_t i) { return p[i]; });
  });
}

// ---- SGD ----

enum class Momentum { None, First, Blend };

// SGD's coefficients, rounded once from double to the type the update computes in.
template <class A>
struct SgdCoeffs {
  A lr, wd, mom, keep;
  explicit SgdCoeffs(const SgdHyper& h)
      : lr(static_cast<A>(h.lr)),
        wd(static_cast<A>(h.weight_decay)),
        mom(static_cast<A>(h.momentum)),
        keep(static_cast<A>(1.0 - h.dampening)) {}
};

// The SGD rule on one value or on 16 lanes (V = A or Lanes16): the parameter p, its gradient d
// and the old momentum buffer in; the new parameter and buffer out. The scalar and the vector
// loops share it, so both contract the same multiply-adds.
template <Momentum kMode, bool kWd, bool kNesterov, class V, class A>
inline void sgd_rule(V p, V d, V old_buf, V& new_p, V& new_buf, const SgdCoeffs<A>& c) {
  if constexpr (kWd) d = d + p * c.wd;
  if constexpr (kMode != Momentum::None) {
    // The first step copies d into the buffer (PyTorch's rule), later ones blend it in.
    V b = d;
    if constexpr (kMode == Momentum::Blend) b = old_buf * c.mom + c.keep * d;
    new_buf = b;
    if constexpr (kNesterov)
      d = d + b * c.mom;
    else
      d = b;
  }
  new_p = p - c.lr * d;
}

template <class T, Momentum kMode, bool kWd, bool kNesterov>
void sgd_range(int64_t begin, int64_t end, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ buf,
               const SgdCoeffs<acc_t<T>>& c) {
  using A = acc_t<T>;
  for (int64_t i = begin; i < end; ++i) {
    A new_p, new_buf;
    sgd_rule<kMode, kWd, kNesterov>(static_cast<A>(param[i]), static_cast<A>(grad[i]),
                                    kMode == Momentum::Blend ? static_cast<A>(buf[i]) : A{}, new_p, new_buf, c);
    if constexpr (kMode != Momentum::None) buf[i] = static_cast<T>(new_buf);
    param[i] = static_cast<T>(new_p);
  }
}

// The gradient's value 16 lanes (or one) at a time: with kUnscale multiplied by `unscale` first
// and written back (Optimizer::step_unscaling: GradScaler's unscale in this pass, the same
// float32 product as its own kernel's).
template <bool kUnscale>
inline Lanes16 grad_lanes(float* grad, int64_t i, float unscale) {
  Lanes16 d = load_lanes16(grad + i);
  if constexpr (kUnscale) {
    d = d * unscale;
    store_lanes16(grad + i, d);
  }
  return d;
}
template <bool kUnscale>
inline float grad_value(float* grad, int64_t i, float unscale) {
  float d = grad[i];
  if constexpr (kUnscale) {
    d = d * unscale;
    grad[i] = d;
  }
  return d;
}

template <Momentum kMode, bool kWd, bool kNesterov, bool kUnscale, class C>
void sgd_range_f32(int64_t begin, int64_t end, float* __restrict__ param, float* __restrict__ grad,
                   float* __restrict__ buf, C* copy, bool stream, const SgdCoeffs<float>& c, float unscale) {
  float_update_loop(
      begin, end, copy, stream,
      [&](int64_t i) {
        prefetch_ahead(param + i);
        prefetch_ahead(grad + i);
        Lanes16 old_buf = {}, new_p, new_buf;
        if constexpr (kMode == Momentum::Blend) {
          prefetch_ahead(buf + i);
          old_buf = load_lanes16(buf + i);
        }
        sgd_rule<kMode, kWd, kNesterov>(load_lanes16(param + i), grad_lanes<kUnscale>(grad, i, unscale), old_buf, new_p,
                                        new_buf, c);
        if constexpr (kMode != Momentum::None) store_lanes16(buf + i, new_buf);
        store_lanes16(param + i, new_p);
        return new_p;
      },
      [&](int64_t i) {
        float new_p, new_buf;
        sgd_rule<kMode, kWd, kNesterov>(param[i], grad_value<kUnscale>(grad, i, unscale),
                                        kMode == Momentum::Blend ? buf[i] : 0.0f, new_p, new_buf, c);
        if constexpr (kMode != Momentum::None) buf[i] = new_buf;
        param[i] = new_p;
        return new_p;
      });
}

// A fused kernel asked to unscale a gradient it cannot write (step_unscaling allows float32 only).
void check_no_unscale(float unscale, const char* optimizer) {
  HG_CHECK(unscale == 0.0f, optimizer, "the unscale folded into the update needs a float32 parameter");
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
    T* g = static_cast<T*>(grad.raw_data());
    T* b = buf.defined() ? static_cast<T*>(buf.raw_data()) : nullptr;
    const SgdCoeffs<acc_t<T>> c(h);
    with_flag(h.weight_decay != 0, [&](auto wd) {
      with_flag(h.nesterov && mode != Momentum::None, [&](auto nesterov) {
        auto run = [&](auto m) {
          constexpr Momentum kMode = decltype(m)::value;
          constexpr bool kWd = decltype(wd)::value, kNesterov = decltype(nesterov)::value;
          if constexpr (std::is_same_v<T, float>) {
            with_flag(h.unscale_grad_by != 0.0f, [&](auto unscale) {
              float_update(n, cast_out, [&](int64_t begin, int64_t end, auto* copy, bool stream) {
                sgd_range_f32<kMode, kWd, kNesterov, decltype(unscale)::value>(begin, end, p, g, b, copy, stream, c,
                                                                               h.unscale_grad_by);
              });
            });
          } else {
            HG_CHECK(!cast_out.defined(), "optimizer", "a warm cast needs a float32 parameter, got {}", dtype_of<T>);
            check_no_unscale(h.unscale_grad_by, "SGD");
            parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
              sgd_range<T, kMode, kWd, kNesterov>(begin, end, p, g, b, c);
            });
          }
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

// ---- Adam / AdamW ----

// Adam's coefficients for step t, rounded once from double.
template <class A>
struct AdamCoeffs {
  A b1, b2, keep1, keep2, step_size, bias2_sqrt, eps, wd, decay;
  AdamCoeffs(const AdamHyper& h, int64_t t)
      : b1(static_cast<A>(h.beta1)),
        b2(static_cast<A>(h.beta2)),
        keep1(static_cast<A>(1.0 - h.beta1)),
        keep2(static_cast<A>(1.0 - h.beta2)),
        step_size(static_cast<A>(h.lr / (1.0 - std::pow(h.beta1, static_cast<double>(t))))),
        bias2_sqrt(static_cast<A>(std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(t))))),
        eps(static_cast<A>(h.eps)),
        wd(static_cast<A>(h.weight_decay)),
        decay(static_cast<A>(1.0 - h.lr * h.weight_decay)) {}
};

inline float square_root(float x) { return std::sqrt(x); }
inline double square_root(double x) { return std::sqrt(x); }
inline Lanes16 square_root(Lanes16 x) {
#ifdef __AVX512F__
  __m512 v;
  std::memcpy(&v, &x, sizeof v);
  v = _mm512_maskz_sqrt_ps(0xffff, v);  // correctly rounded, as std::sqrt (maskz: see load_lanes16)
  std::memcpy(&x, &v, sizeof x);
#else
  for (int64_t l = 0; l < kLanes16; ++l) x[l] = std::sqrt(x[l]);
#endif
  return x;
}

// maximum(): NaN propagates.
template <class V>
inline V maximum_keeping_nan(V old, V v) {
  if constexpr (std::is_same_v<V, Lanes16>)
    return ((old != old) | (old > v)) ? old : v;
  else
    return (old != old || old > v) ? old : v;
}

// The Adam rule on one value or on 16 lanes: p, g and the moments in (old_max only with
// amsgrad); the new parameter and moments out.
template <bool kWd, bool kDecoupled, bool kAmsgrad, class V, class A>
inline void adam_rule(V p, V g, V old_m, V old_v, V old_max, V& new_p, V& new_m, V& new_v, V& new_max,
                      const AdamCoeffs<A>& c) {
  if constexpr (kWd) {
    if constexpr (kDecoupled)
      p = p * c.decay;
    else
      g = g + p * c.wd;
  }
  new_m = old_m * c.b1 + c.keep1 * g;
  new_v = old_v * c.b2 + c.keep2 * (g * g);
  V second = new_v;
  if constexpr (kAmsgrad) {
    second = maximum_keeping_nan(old_max, new_v);
    new_max = second;
  }
  const V denom = square_root(second) / c.bias2_sqrt + c.eps;
  new_p = p - c.step_size * (new_m / denom);
}

template <class T, bool kWd, bool kDecoupled, bool kAmsgrad>
void adam_range(int64_t begin, int64_t end, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ m_,
                T* __restrict__ v_, T* __restrict__ vmax_, const AdamCoeffs<acc_t<T>>& c) {
  using A = acc_t<T>;
  for (int64_t i = begin; i < end; ++i) {
    A new_p, new_m, new_v, new_max;
    adam_rule<kWd, kDecoupled, kAmsgrad>(static_cast<A>(param[i]), static_cast<A>(grad[i]), static_cast<A>(m_[i]),
                                         static_cast<A>(v_[i]), kAmsgrad ? static_cast<A>(vmax_[i]) : A{}, new_p, new_m,
                                         new_v, new_max, c);
    m_[i] = static_cast<T>(new_m);
    v_[i] = static_cast<T>(new_v);
    if constexpr (kAmsgrad) vmax_[i] = static_cast<T>(new_max);
    param[i] = static_cast<T>(new_p);
  }
}

template <bool kWd, bool kDecoupled, bool kAmsgrad, bool kUnscale, class C>
void adam_range_f32(int64_t begin, int64_t end, float* __restrict__ param, float* __restrict__ grad,
                    float* __restrict__ m_, float* __restrict__ v_, float* __restrict__ vmax_, C* copy, bool stream,
                    const AdamCoeffs<float>& c, float unscale) {
  float_update_loop(
      begin, end, copy, stream,
      [&](int64_t i) {
        for (const float* s : {static_cast<const float*>(param), static_cast<const float*>(grad),
                               static_cast<const float*>(m_), static_cast<const float*>(v_)})
          prefetch_ahead(s + i);
        Lanes16 old_max = {}, new_p, new_m, new_v, new_max;
        if constexpr (kAmsgrad) {
          prefetch_ahead(vmax_ + i);
          old_max = load_lanes16(vmax_ + i);
        }
        adam_rule<kWd, kDecoupled, kAmsgrad>(load_lanes16(param + i), grad_lanes<kUnscale>(grad, i, unscale),
                                             load_lanes16(m_ + i), load_lanes16(v_ + i), old_max, new_p, new_m, new_v,
                                             new_max, c);
        store_lanes16(m_ + i, new_m);
        store_lanes16(v_ + i, new_v);
        if constexpr (kAmsgrad) store_lanes16(vmax_ + i, new_max);
        store_lanes16(param + i, new_p);
        return new_p;
      },
      [&](int64_t i) {
        float new_p, new_m, new_v, new_max;
        adam_rule<kWd, kDecoupled, kAmsgrad>(param[i], grad_value<kUnscale>(grad, i, unscale), m_[i], v_[i],
                                             kAmsgrad ? vmax_[i] : 0.0f, new_p, new_m, new_v, new_max, c);
        m_[i] = new_m;
        v_[i] = new_v;
        if constexpr (kAmsgrad) vmax_[i] = new_max;
        param[i] = new_p;
        return new_p;
      });
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
    T* g = static_cast<T*>(grad.raw_data());
    T* pm = static_cast<T*>(m.raw_data());
    T* pv = static_cast<T*>(v.raw_data());
    T* pvmax = vmax.defined() ? static_cast<T*>(vmax.raw_data()) : nullptr;
    const AdamCoeffs<acc_t<T>> c(h, t);
    with_flag(h.weight_decay != 0, [&](auto wd) {
      with_flag(h.decoupled, [&](auto decoupled) {
        with_flag(pvmax != nullptr, [&](auto amsgrad) {
          constexpr bool kWd = decltype(wd)::value, kDecoupled = decltype(decoupled)::value;
          constexpr bool kAmsgrad = decltype(amsgrad)::value;
          if constexpr (std::is_same_v<T, float>) {
            with_flag(h.unscale_grad_by != 0.0f, [&](auto unscale) {
              float_update(n, cast_out, [&](int64_t begin, int64_t end, auto* copy, bool stream) {
                adam_range_f32<kWd, kDecoupled, kAmsgrad, decltype(unscale)::value>(begin, end, p, g, pm, pv, pvmax,
                                                                                    copy, stream, c, h.unscale_grad_by);
              });
            });
          } else {
            HG_CHECK(!cast_out.defined(), "optimizer", "a warm cast needs a float32 parameter, got {}", dtype_of<T>);
            check_no_unscale(h.unscale_grad_by, "Adam");
            parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
              adam_range<T, kWd, kDecoupled, kAmsgrad>(begin, end, p, g, pm, pv, pvmax, c);
            });
          }
        });
      });
    });
  });
}

// ---- multi-tensor updates: the per-parameter kernels above over a list ----

// Runs one(i) for every parameter of the list: a large one on its own (its kernel splits it over
// the threads), the small ones spread over the threads together, which one call per parameter
// cannot do (each would run on the calling thread alone).
template <class One>
void for_each_listed(const TensorList& params, One&& one) {
  std::vector<size_t> small;
  int64_t small_numel = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    if (n >= kParallelGrain) {
      one(i);
    } else {
      small.push_back(i);
      small_numel += n;
    }
  }
  if (small.empty()) return;
  const auto count = static_cast<int64_t>(small.size());
  // About kParallelGrain values a task, as parallel_for gives one large tensor.
  const int64_t grain = std::max<int64_t>(1, kParallelGrain * count / std::max<int64_t>(small_numel, 1));
  parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) one(small[static_cast<size_t>(k)]);
  });
}

void sgd_multi_update_cpu(const TensorList& params, const TensorList& grads, const TensorList& bufs,
                          const TensorList& ready, const Tensor& skip, const TensorList& cast_outs, const Tensor& hyper,
                          bool nesterov, float unscale_grad_by) {
  optim::check_multi_update("SGD", params, grads, {&bufs}, {{&ready, kInt32}}, cast_outs, skip, hyper,
                            optim::kSgdHyperSize);
  HG_CHECK(bufs.size() == ready.size(), "SGD", "momentum buffers and ready flags come together");
  const double* v = hyper.data_ptr<double>();  // on the CPU the device scalars are host memory
  const SgdHyper h{v[optim::kSgdLr], v[optim::kSgdMomentum], v[optim::kSgdDampening], v[optim::kSgdWeightDecay],
                   nesterov,         unscale_grad_by};
  const bool momentum = !bufs.empty();
  for_each_listed(params, [&](size_t i) {
    sgd_update_cpu(params[i], grads[i], momentum ? bufs[i] : Tensor(), momentum ? ready[i] : Tensor(), skip,
                   cast_outs[i], h);
  });
}

void adam_multi_update_cpu(const TensorList& params, const TensorList& grads, const TensorList& m, const TensorList& v,
                           const TensorList& vmax, const TensorList& steps, const Tensor& skip,
                           const TensorList& cast_outs, const Tensor& hyper, bool decoupled, float unscale_grad_by) {
  optim::check_multi_update("Adam", params, grads, {&m, &v, &vmax}, {{&steps, kInt64}}, cast_outs, skip, hyper,
                            optim::kAdamHyperSize);
  HG_CHECK(m.size() == params.size() && v.size() == params.size() && steps.size() == params.size(), "Adam",
           "every param needs exp_avg, exp_avg_sq and a step");
  const double* hv = hyper.data_ptr<double>();
  const AdamHyper h{hv[optim::kAdamLr],
                    hv[optim::kAdamBeta1],
                    hv[optim::kAdamBeta2],
                    hv[optim::kAdamEps],
                    hv[optim::kAdamWeightDecay],
                    decoupled,
                    !vmax.empty(),
                    unscale_grad_by};
  const bool amsgrad = !vmax.empty();
  for_each_listed(params, [&](size_t i) {
    adam_update_cpu(params[i], grads[i], m[i], v[i], amsgrad ? vmax[i] : Tensor(), steps[i], skip, cast_outs[i], h);
  });
}

}  // namespace

HG_REGISTER_KERNEL(optim::sgd_update_stub, kCPU, sgd_update_cpu);
HG_REGISTER_KERNEL(optim::adam_update_stub, kCPU, adam_update_cpu);
HG_REGISTER_KERNEL(optim::sgd_multi_update_stub, kCPU, sgd_multi_update_cpu);
HG_REGISTER_KERNEL(optim::adam_multi_update_stub, kCPU, adam_multi_update_cpu);

}  // namespace hg::cpu
