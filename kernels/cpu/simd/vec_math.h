// Float32 maps for the elementwise functors: map_unary(f, x, y, n) sets y[i] = f(x[i]). Ops whose
// scalar maths calls libm (exp, log, tanh, erf, pow, ...) use SLEEF's vector functions at the
// widest width the build targets (SSE2 at least, AVX-512 with -march=native on such a CPU);
// the rest, and every op in a build without SLEEF, are plain loops the compiler vectorises.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/scalar_ops.h"
#include "kernels/cpu/simd/lanes16.h"

#if HG_HAVE_SLEEF && defined(__SSE2__)
#include <immintrin.h>
#include <sleef.h>
#define HG_VEC_MATH 1
#else
#define HG_VEC_MATH 0
#endif

namespace hg::cpu {

#if HG_VEC_MATH
namespace vec {

// V is a GCC/Clang vector type, so + - * / and comparisons are lane-wise and `mask ? a : b`
// selects per lane. SLEEF's u10 functions are within 1.0 ULP.
#if defined(__AVX512F__)
using V = __m512;
inline constexpr int kWidth = 16;
#define HG_SLEEF(fn, ulp) Sleef_##fn##f16_##ulp
#elif defined(__AVX__)
using V = __m256;
inline constexpr int kWidth = 8;
#define HG_SLEEF(fn, ulp) Sleef_##fn##f8_##ulp
#else
using V = __m128;
inline constexpr int kWidth = 4;
#define HG_SLEEF(fn, ulp) Sleef_##fn##f4_##ulp
#endif

inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }
inline V splat(float f) { return V{} + f; }

// True when some lane of x is greater than t (a rare-path test, one instruction or two).
inline bool any_greater(V x, float t) {
#if defined(__AVX512F__)
  return _mm512_cmp_ps_mask(x, splat(t), _CMP_GT_OQ) != 0;
#elif defined(__AVX__)
  return _mm256_movemask_ps(_mm256_cmp_ps(x, splat(t), _CMP_GT_OQ)) != 0;
#else
  return _mm_movemask_ps(_mm_cmpgt_ps(x, splat(t))) != 0;
#endif
}

// The same split by sign as scalar::Sigmoid, so exp never overflows.
inline V sigmoid(V x) {
  const auto pos = x >= splat(0.0f);
  const V e = HG_SLEEF(exp, u10)(pos ? -x : x);
  const V r = splat(1.0f) / (splat(1.0f) + e);
  return pos ? r : e * r;
}

// Op<F> is the vector form of functor F, built from it (so it sees the op's parameters).
template <class F>
struct Op {
  static constexpr bool kScalarOnly = true;  // no vector form: map_unary runs the scalar loop
};

template <>
struct Op<scalar::Exp> {
  V operator()(V x) const { return HG_SLEEF(exp, u10)(x); }
};
template <>
struct Op<scalar::Log> {
  V operator()(V x) const { return HG_SLEEF(log, u10)(x); }
};
template <>
struct Op<scalar::Log1p> {
  V operator()(V x) const {
    const V r = HG_SLEEF(log1p, u10)(x);
    // SLEEF 3.5's log1pf overflows to inf above about 1e38, where log1p(x) = log(x) in float.
    if (any_greater(x, 1e30f)) return x > splat(1e30f) ? HG_SLEEF(log, u10)(x) : r;
    return r;
  }
};
template <>
struct Op<scalar::Tanh> {
  V operator()(V x) const { return HG_SLEEF(tanh, u10)(x); }
};
template <>
struct Op<scalar::Erf> {
  V operator()(V x) const { return HG_SLEEF(erf, u10)(x); }
};
template <>
struct Op<scalar::Sigmoid> {
  V operator()(V x) const { return sigmoid(x); }
};
// exp(x) for x <= 0 (gelu's exp(-z^2), a row shifted by its max): x = n ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor polynomial to r^7 (truncation below 2e-8 relative, about a
// float32 ULP), times 2^n by AVX-512's scalef; about half the instructions of SLEEF's expf. Below
// -104 (and at -inf) it is 0; a NaN stays NaN; a small positive x (a value a rounding above its
// row's log-sum-exp) is as accurate. Elsewhere SLEEF's exp.
inline V exp_nonpositive(V x) {
#if defined(__AVX512F__)
  // (the maskz forms: gcc 12 warns about the unmasked ones' undefined pass-through)
  x = _mm512_maskz_max_ps(0xffff, splat(-104.0f), x);  // e^-104 underflows to 0; max returns its second
                                                       // operand, x, where x is NaN
  const V n = _mm512_maskz_roundscale_ps(0xffff, x * splat(1.44269504088896341f),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const V r = (x - n * splat(0.693145751953125f)) - n * splat(1.428606765330187e-06f);  // ln2 in two parts
  V p = splat(1.0f / 5040) * r + splat(1.0f / 720);
  p = p * r + splat(1.0f / 120);
  p = p * r + splat(1.0f / 24);
  p = p * r + splat(1.0f / 6);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  return _mm512_maskz_scalef_ps(0xffff, p, n);
#else
  return HG_SLEEF(exp, u10)(x);
#endif
}

// erf to an absolute error of 1.5e-7 (Abramowitz and Stegun 7.1.26, as PyTorch's gelu uses):
// one exp instead of SLEEF's erf, which is ~10x slower. Only gelu uses it, where the error is
// scaled by 0.5 x and so stays within a few ULPs of x (tests/cpu/test_elementwise_functors.cpp
// bounds it by 10 ULPs of x).
// erf(x) with the exp(-x^2) it was computed from (gelu's backward needs that too).
struct ErfParts {
  V erf, exp_neg_x2;
};
inline ErfParts erf_fast_parts(V x) {
  const V ax = x < splat(0.0f) ? -x : x;
  const V t = splat(1.0f) / (splat(0.3275911f) * ax + splat(1.0f));
  V r = splat(1.061405429f) * t + splat(-1.453152027f);
  r = r * t + splat(1.421413741f);
  r = r * t + splat(-0.284496736f);
  r = r * t + splat(0.254829592f);
  const V ex = exp_nonpositive(-(x * x));
  const V e = splat(1.0f) - r * t * ex;
  return {x < splat(0.0f) ? -e : e, ex};
}
inline V erf_fast(V x) { return erf_fast_parts(x).erf; }

template <>
struct Op<scalar::Gelu> {
  V operator()(V x) const { return splat(0.5f) * x * (splat(1.0f) + erf_fast(x * splat(0.70710678118654752440f))); }
};
template <>
struct Op<scalar::GeluTanh> {
  V operator()(V x) const {
    const V k = splat(static_cast<float>(2 * 0.79788456080286535588)), c = splat(0.044715f);
    return x * sigmoid(k * (x + c * x * x * x));
  }
};
template <>
struct Op<scalar::Softplus> {
  float beta, threshold;
  explicit Op(const scalar::Softplus& f)
      : beta(static_cast<float>(f.beta)), threshold(static_cast<float>(f.threshold)) {}
  V operator()(V x) const {
    const V bx = splat(beta) * x;
    const V r = HG_SLEEF(log1p, u10)(HG_SLEEF(exp, u10)(bx)) / splat(beta);
    return bx > splat(threshold) ? x : r;
  }
};
template <>
struct Op<scalar::PowScalar> {
  float exponent;
  explicit Op(const scalar::PowScalar& f) : exponent(static_cast<float>(f.exponent)) {}
  V operator()(V x) const {
    if (exponent == 2.0f) return x * x;  // exact, and the common case
    return HG_SLEEF(pow, u10)(x, splat(exponent));
  }
};

// Two-input functors (the fused gradients): Op2<F>(g, x).
template <class F>
struct Op2 {
  static constexpr bool kScalarOnly = true;
};
template <>
struct Op2<scalar::GeluBackward> {
  V operator()(V g, V x) const {
    // erf_fast(x / sqrt 2) and phi(x) share their exp(-x^2 / 2).
    const ErfParts p = erf_fast_parts(x * splat(0.70710678118654752440f));
    const V cdf = splat(0.5f) * (splat(1.0f) + p.erf);
    const V x_pdf = x * p.exp_neg_x2 * splat(0.39894228040143267794f);
    return g * (cdf + (p.exp_neg_x2 > splat(0.0f) ? x_pdf : splat(0.0f)));
  }
};
template <>
struct Op2<scalar::GeluTanhBackward> {
  V operator()(V g, V x) const {
    const V k2 = splat(static_cast<float>(2 * 0.79788456080286535588)), c = splat(0.044715f);
    const V z = k2 * (x + c * x * x * x);
    const auto neg = z < splat(0.0f);
    const V e = HG_SLEEF(exp, u10)(neg ? z : -z);
    const V r = splat(1.0f) / (splat(1.0f) + e);
    const V s = neg ? e * r : r, ds = e * r * r;
    const V slope = x * ds * k2 * (splat(1.0f) + splat(3.0f) * c * x * x);
    return g * (s + (ds != splat(0.0f) ? slope : splat(0.0f)));
  }
};

template <class F>
Op<F> make_op(const F& f) {
  if constexpr (std::is_constructible_v<Op<F>, const F&>) {
    return Op<F>(f);
  } else {
    return Op<F>{};
  }
}

}  // namespace vec

// True when F has a vector form (its scalar form would call libm once per element).
template <class F>
inline constexpr bool has_vec_op = !requires {
  vec::Op<F>::kScalarOnly;
};
template <class F>
inline constexpr bool has_vec_op2 = !requires {
  vec::Op2<F>::kScalarOnly;
};
#else
template <class F>
inline constexpr bool has_vec_op = false;
template <class F>
inline constexpr bool has_vec_op2 = false;
#endif

// y[i] = f(x[i]) for i < n (x and y may be the same array).
template <class F>
void map_unary(const F& f, const float* x, float* y, int64_t n) {
#if HG_VEC_MATH
  if constexpr (has_vec_op<F>) {
    const auto op = vec::make_op(f);
    int64_t i = 0;
    for (; i + vec::kWidth <= n; i += vec::kWidth) vec::store(y + i, op(vec::load(x + i)));
    if (i < n) {  // the tail goes through the same vector code, so results never depend on position
      float buf[vec::kWidth] = {};
      std::memcpy(buf, x + i, static_cast<size_t>(n - i) * sizeof(float));
      vec::store(buf, op(vec::load(buf)));
      std::memcpy(y + i, buf, static_cast<size_t>(n - i) * sizeof(float));
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// z[i] = f(a[i], b[i]) for i < n, for the two-input functors with a vector form (Op2).
template <class F>
void map_binary(const F& f, const float* a, const float* b, float* z, int64_t n) {
#if HG_VEC_MATH
  if constexpr (has_vec_op2<F>) {
    const vec::Op2<F> op{};
    int64_t i = 0;
    for (; i + vec::kWidth <= n; i += vec::kWidth) vec::store(z + i, op(vec::load(a + i), vec::load(b + i)));
    if (i < n) {  // the tail through the same vector code
      float bufa[vec::kWidth] = {}, bufb[vec::kWidth] = {};
      std::memcpy(bufa, a + i, static_cast<size_t>(n - i) * sizeof(float));
      std::memcpy(bufb, b + i, static_cast<size_t>(n - i) * sizeof(float));
      vec::store(bufa, op(vec::load(bufa), vec::load(bufb)));
      std::memcpy(z + i, bufa, static_cast<size_t>(n - i) * sizeof(float));
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) z[i] = f(a[i], b[i]);
}

// y[i] = exp(x[i] - shift) for i < n (y may be x), where no x[i] - shift is much above 0: a row
// shifted by its max, or by its log-sum-exp (softmax, cross_entropy, attention); returns their
// sum. AVX-512 runs exp_nonpositive with a masked tail (a row of 10 classes is one vector, with
// no copy through a buffer) and sums in the registers, lane by lane and then across the lanes
// (a masked store does not forward to the loads after it); elsewhere SLEEF's exp (map_unary), or
// libm's, and a sum in order.
inline float exp_shifted_row(const float* x, float shift, float* y, int64_t n) {
#if HG_VEC_MATH && defined(__AVX512F__) && defined(__AVX512BW__)
  const vec::V by = vec::splat(shift);
  vec::V sum = vec::splat(0.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const vec::V e = vec::exp_nonpositive(_mm512_loadu_ps(x + i) - by);
    _mm512_storeu_ps(y + i, e);
    sum += e;
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const vec::V e = _mm512_maskz_mov_ps(m, vec::exp_nonpositive(_mm512_maskz_loadu_ps(m, x + i) - by));
    _mm512_mask_storeu_ps(y + i, m, e);
    sum += e;
  }
  return lanes16_sum(std::bit_cast<Lanes16>(sum));
#else
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
  map_unary(scalar::Exp{}, y, y, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += y[i];
  return sum;
#endif
}

// y[i] = 1 / sqrt(x[i]) for results that are rounded to a 16-bit float next: AVX-512's 14-bit
// estimate and one Newton step (relative error near 2^-27, far inside a 16-bit rounding), about
// three times the throughput of the float32 sqrt and division; zeros, denormals, negatives, inf
// and NaN take the exact formula. Elsewhere the exact loop.
inline void map_rsqrt_for_16bit(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 lo = _mm512_set1_ps(1.17549435e-38f), hi = _mm512_set1_ps(3.40282347e38f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = _mm512_maskz_rsqrt14_ps(0xffff, v);  // (maskz forms: see exp_nonpositive)
    // e (1.5 - 0.5 v e^2)
    const __m512 half_v_e2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.5f)), e), e);
    const __m512 refined = _mm512_mul_ps(e, _mm512_sub_ps(_mm512_set1_ps(1.5f), half_v_e2));
    const __mmask16 normal = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(v, hi, _CMP_LE_OQ);
    if (normal == 0xffff) {
      _mm512_storeu_ps(y + i, refined);
    } else {
      const __m512 exact = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_maskz_sqrt_ps(0xffff, v));
      _mm512_storeu_ps(y + i, _mm512_mask_blend_ps(normal, exact, refined));
    }
  }
#endif
  for (; i < n; ++i) y[i] = 1.0f / std::sqrt(x[i]);
}

}  // namespace hg::cpu
