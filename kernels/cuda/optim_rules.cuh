// The per-element SGD and Adam rules of the CUDA optimizer kernels, shared by the per-parameter
// kernels (optim.cu) and the multi-tensor ones (optim_multi.cu), so both give the same bits:
// the same expressions in the same order, hence the same multiply-add contractions.
#pragma once

#include <type_traits>

#include "framework/ops/optim_update_kernels.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {

__device__ __forceinline__ bool optim_skipped(const float* skip) { return skip != nullptr && *skip != 0.0f; }

// The new weight rounded to the warm cast's dtype C (nothing when C is void).
template <class T, class C>
__device__ __forceinline__ C optim_cast_value(acc_t<T> value) {
  return from_acc<C>(static_cast<float>(from_acc<T>(value)));
}

// SGD on one value: the parameter p and gradient d in (as acc_t<T>), the momentum buffer
// element `buf` updated in place when non-null (`first`: the step that copies d into it);
// returns the new parameter.
template <class T>
__device__ __forceinline__ acc_t<T> sgd_value(acc_t<T> p, acc_t<T> d, T* buf, bool first, const optim::SgdHyper& h) {
  using A = acc_t<T>;
  if (h.weight_decay != 0) d += p * static_cast<A>(h.weight_decay);
  if (buf != nullptr) {
    // The first step copies d into the buffer (PyTorch's rule), later ones blend it in.
    const A b = first ? d : to_acc(*buf) * static_cast<A>(h.momentum) + d * static_cast<A>(1.0 - h.dampening);
    *buf = from_acc<T>(b);
    d = h.nesterov ? d + b * static_cast<A>(h.momentum) : b;
  }
  return p - static_cast<A>(h.lr) * d;
}

// Adam's coefficients for step t, as each thread computes them.
template <class A>
struct AdamStepCoeffs {
  A b1, b2, bias2_sqrt, step_size, eps, wd, decay;
  bool has_wd, decoupled;
  __device__ __forceinline__ AdamStepCoeffs(const optim::AdamHyper& h, int64_t step) {
    const auto t = static_cast<double>(step);
    const A bias1 = static_cast<A>(1.0 - pow(h.beta1, t));
    bias2_sqrt = static_cast<A>(sqrt(1.0 - pow(h.beta2, t)));
    b1 = static_cast<A>(h.beta1);
    b2 = static_cast<A>(h.beta2);
    step_size = static_cast<A>(h.lr) / bias1;
    eps = static_cast<A>(h.eps);
    wd = static_cast<A>(h.weight_decay);
    decay = static_cast<A>(1.0 - h.lr * h.weight_decay);
    has_wd = h.weight_decay != 0;
    decoupled = h.decoupled;
  }
};

// Adam on one value: p and g in, the moments updated in place (vmax when non-null: amsgrad);
// returns the new parameter.
template <class T>
__device__ __forceinline__ acc_t<T> adam_value(acc_t<T> p, acc_t<T> g, T& m_, T& v_, T* vmax_,
                                               const AdamStepCoeffs<acc_t<T>>& c) {
  using A = acc_t<T>;
  if (c.has_wd) {
    if (c.decoupled)
      p *= c.decay;
    else
      g += p * c.wd;
  }
  const A m = to_acc(m_) * c.b1 + g * (A(1) - c.b1);
  const A v = to_acc(v_) * c.b2 + g * g * (A(1) - c.b2);
  m_ = from_acc<T>(m);
  v_ = from_acc<T>(v);
  A second = v;
  if (vmax_ != nullptr) {
    const A vm = fmax(to_acc(*vmax_), v);
    *vmax_ = from_acc<T>(vm);
    second = vm;
  }
  const A denom = sqrt(second) / c.bias2_sqrt + c.eps;
  return p - c.step_size * (m / denom);
}

}  // namespace hg::cuda
