// Scalar maths written once for the CPU loops and the CUDA kernels: one functor per elementwise
// op, X-macro tables mapping each UnaryOp/BinaryOp to its functor, and dispatchers that switch
// on the op once per call so each loop or kernel is specialised for one functor. Arithmetic on
// 16-bit floats is done in float (acc_t), and results are rounded once when stored.
#pragma once

#include <cmath>
#include <type_traits>

#include "framework/error.h"
#include "framework/half.h"
#include "framework/ops/binary.h"
#include "framework/ops/unary.h"

namespace hg::scalar {

// ---- unary ----
struct Neg {
  static constexpr bool kKeepsIntegers = true;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return -x;
  }
};
struct Exp {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::exp(x);
  }
};
struct Log {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::log(x);
  }
};
struct Log1p {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::log1p(x);
  }
};
struct Sqrt {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct Rsqrt {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct Reciprocal {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return T(1) / x;
  }
};
struct Abs {
  static constexpr bool kKeepsIntegers = true;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? -x : x;
    }
  }
};
struct Sigmoid {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    // Split by sign so exp never overflows.
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
};
struct Tanh {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::tanh(x);
  }
};
struct Relu {
  static constexpr bool kKeepsIntegers = true;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : (x != x ? x : T(0));  // NaN propagates
  }
};
// x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), as PyTorch computes it: erf is several times faster
// than erfc in SLEEF; the left tail (x < -3) is accurate in absolute terms only.
struct Gelu {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
};
// PyTorch's tanh approximation 0.5 x (1 + tanh(u)), computed as x sigmoid(2u), the same
// function without the cancellation for negative x.
struct GeluTanh {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    const T k = T(2 * 0.79788456080286535588), c = T(0.044715);
    return x * Sigmoid{}(k * (x + c * x * x * x));
  }
};
// log(1 + exp(beta x)) / beta, linear above threshold (as PyTorch).
struct Softplus {
  double beta = 1, threshold = 20;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    const T bx = T(beta) * x;
    return bx > T(threshold) ? x : std::log1p(std::exp(bx)) / T(beta);
  }
};
struct PowScalar {
  double exponent = 1;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    if (exponent == 2) return x * x;  // exact (libm's powf is not always correctly rounded here)
    return std::pow(x, T(exponent));
  }
};
struct Erf {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return std::erf(x);
  }
};
// x where x > 0, else slope x (NaN propagates through the product).
struct LeakyRelu {
  double slope = 0.01;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : x * T(slope);
  }
};
// scale x where x > 0, else scale alpha expm1(x): elu (scale 1) and selu share it, as in PyTorch.
struct Elu {
  double alpha = 1, scale = 1;
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? T(scale) * x : T(scale * alpha) * std::expm1(x);
  }
};
// x tanh(log1p(exp(x))), PyTorch's formula: exp overflows to inf for large x, where
// tanh(inf) = 1 gives x.
struct Mish {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    return x * std::tanh(std::log1p(std::exp(x)));
  }
};
// x min(max(x + 3, 0), 6) / 6, with ternaries (not std::min/max) so NaN propagates on both
// backends.
struct Hardswish {
  template <class T>
  HG_HOST_DEVICE T operator()(T x) const {
    const T r = x + T(3);
    const T c = r < T(0) ? T(0) : (r > T(6) ? T(6) : r);
    return x * c / T(6);
  }
};

// ---- fused gradients: g times the derivative at x, in one pass (no intermediate tensors) ----
// d/dx x Phi(x) = Phi(x) + x phi(x). At x = -inf the product x phi(x) is 0, not inf * 0.
struct GeluBackward {
  template <class T>
  HG_HOST_DEVICE T operator()(T g, T x) const {
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);  // 1 / sqrt(2 pi)
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    return g * (cdf + (pdf > T(0) ? x * pdf : T(0)));
  }
};
// GeluTanh is x s with s = sigmoid(z), z = 2 k (x + c x^3): its derivative is s + x s' 2 k (1 + 3 c x^2),
// with s' = s (1 - s) = e / (1 + e)^2 for e = exp(-|z|), which keeps its digits in the tails
// (1 - s rounds to 0 there). s' is 0 once e underflows, where x^2 may be inf.
struct GeluTanhBackward {
  template <class T>
  HG_HOST_DEVICE T operator()(T g, T x) const {
    const T k2 = T(2 * 0.79788456080286535588), c = T(0.044715);
    const T z = k2 * (x + c * x * x * x);
    const T e = std::exp(z < T(0) ? z : -z);
    const T r = T(1) / (T(1) + e);
    const T s = z < T(0) ? e * r : r, ds = e * r * r;
    return g * (s + (ds != T(0) ? x * ds * k2 * (T(1) + T(3) * c * x * x) : T(0)));
  }
};

// ---- binary arithmetic (alpha scales b for Add and Sub) ----
struct Add {
  double alpha = 1;
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return a + T(alpha) * b;
  }
};
struct Sub {
  double alpha = 1;
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return a - T(alpha) * b;
  }
};
struct Mul {
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return a * b;
  }
};
struct Div {
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return a / b;
  }
};
struct Maximum {
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return (a != a || a > b) ? a : b;  // NaN propagates
  }
};
struct Minimum {
  template <class T>
  HG_HOST_DEVICE T operator()(T a, T b) const {
    return (a != a || a < b) ? a : b;
  }
};
// bool tensors: maximum is "or", minimum is "and".
struct Or {
  HG_HOST_DEVICE bool operator()(bool a, bool b) const { return a || b; }
};
struct And {
  HG_HOST_DEVICE bool operator()(bool a, bool b) const { return a && b; }
};

// ---- comparisons (bool results) ----
struct Eq {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a == b;
  }
};
struct Ne {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a != b;
  }
};
struct Lt {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a < b;
  }
};
struct Le {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct Gt {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct Ge {
  template <class T>
  HG_HOST_DEVICE bool operator()(T a, T b) const {
    return a >= b;
  }
};

// ---- the tables: enum value -> functor of the same name ----
// clang-format off
#define HG_UNARY_OPS(X) \
  X(Neg) X(Exp) X(Log) X(Log1p) X(Sqrt) X(Rsqrt) X(Reciprocal) X(Abs) X(Sigmoid) X(Tanh) X(Relu) X(Gelu) \
  X(GeluTanh) X(Softplus) X(PowScalar) X(Erf) X(LeakyRelu) X(Elu) X(Mish) X(Hardswish)
// clang-format on
#define HG_ARITH_OPS(X) X(Add) X(Sub) X(Mul) X(Div) X(Maximum) X(Minimum)
#define HG_COMPARE_OPS(X) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge)

template <class F>
struct OpTag {
  using type = F;
};

// True for the unary ops that map integers to integers (the others see only floating tensors).
template <class F>
inline constexpr bool keeps_integers = requires {
  F::kKeepsIntegers;
};

// The functor for a unary op with its parameters: the exponent for PowScalar; beta and
// threshold for Softplus; the slope for LeakyRelu; alpha and scale for Elu.
template <class F>
F make_unary(double p0, double p1) {
  if constexpr (requires { F{p0, p1}; }) {
    return F{p0, p1};
  } else if constexpr (requires { F{p0}; }) {
    return F{p0};
  } else {
    return F{};
  }
}

template <class F>
F make_binary(double alpha) {
  if constexpr (requires { F{alpha}; }) {
    return F{alpha};
  } else {
    return F{};
  }
}

// fn(OpTag<F>{}) for op's functor F: the one switch, taken once per kernel call.
template <class Fn>
decltype(auto) dispatch_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
#define HG_SCALAR_CASE(name) \
  case UnaryOp::name: return fn(OpTag<name>{});
    HG_UNARY_OPS(HG_SCALAR_CASE)
#undef HG_SCALAR_CASE
  }
  fail("unary", "unknown op {}", static_cast<int>(op));
}

// Arithmetic ops and comparisons separately, as they return different types.
template <class Fn>
decltype(auto) dispatch_arith(BinaryOp op, Fn&& fn) {
  switch (op) {
#define HG_SCALAR_CASE(name) \
  case BinaryOp::name: return fn(OpTag<name>{});
    HG_ARITH_OPS(HG_SCALAR_CASE)
    default: break;
  }
  fail("binary", "{} is not an arithmetic op", static_cast<int>(op));
}

template <class Fn>
decltype(auto) dispatch_compare(BinaryOp op, Fn&& fn) {
  switch (op) {
    HG_COMPARE_OPS(HG_SCALAR_CASE)
#undef HG_SCALAR_CASE
    default: break;
  }
  fail("binary", "{} is not a comparison", static_cast<int>(op));
}

}  // namespace hg::scalar
