// Every elementwise functor through the CPU kernels against float64 std:: maths: error bounds in
// ULPs over wide float32 ranges (denormals, huge magnitudes, inf, NaN) and over every bfloat16
// and float16 value, plus strided, broadcast and multithreaded layouts giving the same bits.
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "helpers.h"

using namespace hg;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  // Bound in float32 ULPs: `base` plus `per_cond` times the op's condition number |x f'(x)/f(x)|
  // at x (rounding the op's float32 intermediates is amplified by it: gelu's tail, sigmoid's).
  double base, per_cond = 0;
  // An absolute allowance of abs_ulps float32 ULPs of |x|: gelu's 1 + erf cancels for x < 0, and
  // its erf is PyTorch's (1.5e-7 in exact arithmetic, measured below 1e-6 in float32).
  double abs_ulps = 0;
};

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): the same function, without float64 cancelling
// 1 + tanh(u) to zero in the left tail.
double gelu_tanh_ref(double x) { return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
// The derivatives the fused gelu backward kernel computes (the limits at +-inf, NaN for NaN).
double gelu_grad_ref(double x) {
  if (!std::isfinite(x)) return std::isnan(x) ? x : x > 0 ? 1.0 : 0.0;
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double gelu_tanh_grad_ref(double x) {
  if (!std::isfinite(x)) return std::isnan(x) ? x : x > 0 ? 1.0 : 0.0;
  const double k2 = 2 * std::sqrt(2 / M_PI), c = 0.044715;
  const double s = 1 / (1 + std::exp(-k2 * (x + c * x * x * x)));
  return s + x * s * (1 - s) * k2 * (1 + 3 * c * x * x);
}
// The gradient of op at t for a gradient of ones, through autograd's backward (grad mode off,
// so gelu's fused backward kernel runs).
Tensor grad_of_ones(const Tensor& t, Tensor (*op)(const Tensor&, bool), bool approx) {
  Tensor x = t.detach().requires_grad_(true);
  op(x, approx).backward(ones_like(x));
  return x.grad();
}
double softplus_ref(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}

// Measured maxima (AVX-512 SLEEF build) are well inside these; see docs/history/PERF.md.
std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& t) { return neg(t); }, [](double x) { return -x; }, 0},
      {"abs", [](const Tensor& t) { return abs(t); }, [](double x) { return std::abs(x); }, 0},
      {"relu", [](const Tensor& t) { return relu(t); }, [](double x) { return std::isnan(x) ? x
                                                                              : x > 0       ? x
                                                                                            : 0.0; },
       0},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }, [](double x) { return 1 / x; }, 0.5},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }, [](double x) { return std::sqrt(x); }, 0.5},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }, [](double x) { return 1 / std::sqrt(x); }, 1.5},
      {"exp", [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, 1.0},
      {"log", [](const Tensor& t) { return log(t); }, [](double x) { return std::log(x); }, 1.0},
      {"log1p", [](const Tensor& t) { return log1p(t); }, [](double x) { return std::log1p(x); }, 1.0},
      // SLEEF's tanhf is within 1 ULP; glibc's (the fallback without SLEEF) within 2.
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, 2.0},
      {"erf", [](const Tensor& t) { return erf(t); }, [](double x) { return std::erf(x); }, 1.0},
      {"pow 2", [](const Tensor& t) { return pow(t, 2.0); }, [](double x) { return x * x; }, 0.5},
      {"pow 2.5", [](const Tensor& t) { return pow(t, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 1.0},
      {"pow -1.5", [](const Tensor& t) { return pow(t, -1.5); }, [](double x) { return std::pow(x, -1.5); }, 1.0},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, [](double x) { return 1 / (1 + std::exp(-x)); }, 2.5,
       0.5},
      {"gelu", [](const Tensor& t) { return gelu(t); }, gelu_ref, 3, 1, 10},
      {"gelu tanh", [](const Tensor& t) { return gelu(t, true); }, gelu_tanh_ref, 4, 1},
      // The fused backward kernels. Their values lie in [-0.17, 1.13], where gelu's erf (1.5e-7
      // absolute) and float32's rounding of the two terms summed are several ULPs of the result;
      // the absolute allowance covers the derivative's zero crossing near x = -0.75.
      {"gelu backward", [](const Tensor& t) { return grad_of_ones(t, gelu, false); }, gelu_grad_ref, 12, 1, 10},
      {"gelu tanh backward", [](const Tensor& t) { return grad_of_ones(t, gelu, true); }, gelu_tanh_grad_ref, 12, 1, 4},
      {"softplus", [](const Tensor& t) { return softplus(t); }, [](double x) { return softplus_ref(x, 1, 20); }, 3, 1},
      {"softplus beta 2", [](const Tensor& t) { return softplus(t, 2.0, 5.0); },
       [](double x) { return softplus_ref(x, 2, 5); }, 3, 1},
  };
}

// A 16-bit or 32-bit float format: significand bits and the smallest normal exponent.
struct Format {
  int digits, min_exp;
  double max;
};
constexpr Format kF32{24, -126, FLT_MAX}, kBF16{8, -126, 3.3895313892515355e38}, kF16{11, -14, 65504};

double ulp(double r, Format f) {
  const int e = r == 0 ? f.min_exp : std::max(std::ilogb(r), f.min_exp);
  return std::ldexp(1.0, e - (f.digits - 1));
}

// Error of `got` against the exact `ref` in ULPs of format f; 0 for matching special values,
// infinity for a NaN, infinity or overflow that should not be there.
double ulp_error(double got, double ref, Format f) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : INFINITY;
  // Values past the largest finite one (by at least half an ULP) round to infinity.
  const bool ref_overflows = std::isinf(ref) || std::abs(ref) >= f.max + ulp(f.max, f) / 2;
  if (std::isinf(got) || ref_overflows) {
    return std::isinf(got) && ref_overflows && std::signbit(got) == std::signbit(ref) ? 0 : INFINITY;
  }
  return std::abs(got - ref) / ulp(ref, f);
}

double condition(const std::function<double(double)>& f, double x) {
  const double y = f(x);
  if (!std::isfinite(x) || !std::isfinite(y) || y == 0 || x == 0) return 0;
  const double h = std::abs(x) * 1e-6;
  const double d = (f(x + h) - f(x - h)) / (2 * h);
  return std::isfinite(d) ? std::abs(x * d / y) : 0;
}

// Float32 inputs: special values, every binade from the smallest denormal to the largest
// finite value in both signs, the edges of exp's range, and dense random values near zero.
std::vector<float> wide_f32_inputs() {
  std::vector<float> v = {0.0f,     -0.0f,   INFINITY, -INFINITY, NAN,           FLT_MIN, -FLT_MIN,  FLT_MAX,
                          -FLT_MAX, 1e-45f,  -1e-45f,  88.72283f, 88.7229f,      89.0f,   -87.3365f, -103.97f,
                          -104.0f,  -150.0f, 1.0f,     -1.0f,     0.5f,          2.0f,    20.0f,     -20.0f,
                          1e-8f,    -1e-8f,  3.0e-39f, -3.0e-39f, 1.1754942e-38f};
  for (int e = -149; e <= 127; ++e) {
    for (float m : {1.0f, 1.171875f, 1.5f, 1.9999999f}) {
      v.push_back(std::ldexp(m, e));
      v.push_back(-std::ldexp(m, e));
    }
  }
  std::mt19937 rng(7);
  for (double range : {1.0, 10.0, 30.0, 100.0}) {
    std::uniform_real_distribution<float> d(static_cast<float>(-range), static_cast<float>(range));
    for (int i = 0; i < 20000; ++i) v.push_back(d(rng));
  }
  return v;
}

// Every value of a 16-bit format, as the float32 values that widen from it.
std::vector<float> all_16bit_values(Dtype d) {
  std::vector<float> v(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    v[b] = d == kBFloat16 ? BFloat16::to_float(static_cast<uint16_t>(b)) : Half::to_float(static_cast<uint16_t>(b));
  }
  return v;
}

void check_unary_bounds(const UnaryCase& c, Dtype dtype, const std::vector<float>& in) {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  const Format f = dtype == kFloat32 ? kF32 : dtype == kBFloat16 ? kBF16 : kF16;
  const auto got = c.op(tensor(in).to(dtype)).to(kFloat64).to_vector<double>();
  REQUIRE(got.size() == in.size());
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double x = in[i], ref = c.ref(x);
    // 16-bit results: half an ULP from the final rounding plus the float32 error, in 16-bit ULPs.
    const double bound32 = c.base + c.per_cond * condition(c.ref, x);
    const double bound = f.digits == 24 ? bound32 : 0.5 + bound32 * std::ldexp(1.0, f.digits - 24) + 1e-9;
    const double err = ulp_error(got[i], ref, f);
    const bool abs_ok = std::isfinite(x) && std::abs(got[i] - ref) <= c.abs_ulps * ulp(x, kF32) + ulp(ref, f) / 2;
    if (err > bound && !abs_ok) {
      if (bad++ < 5)
        FAIL_CHECK(fmt::format("x = {:a} ({}): got {}, float64 {} ({} ULP > {})", x, x, got[i], ref, err, bound));
    } else if (std::isfinite(err) && err <= bound) {
      worst = std::max(worst, err);
    }
  }
  CHECK(bad == 0);
  MESSAGE(fmt::format("{} {}: max {:.3f} ULP (within the bound) over {} inputs", c.name, dtype_name(dtype), worst,
                      in.size()));
}

}  // namespace

TEST_CASE("unary functors stay within their ULP bounds in float32 over the whole range") {
  const auto in = wide_f32_inputs();
  for (const auto& c : unary_cases()) check_unary_bounds(c, kFloat32, in);
}

TEST_CASE("unary functors round every bfloat16 and float16 input correctly") {
  for (Dtype d : {kBFloat16, kFloat16}) {
    const auto in = all_16bit_values(d);
    for (const auto& c : unary_cases()) check_unary_bounds(c, d, in);
  }
}

TEST_CASE("unary functors keep integers exact") {
  const std::vector<int64_t> v = {0, 5, -7, (int64_t{1} << 62) + 1, -(int64_t{1} << 62) - 1};
  const Tensor t = tensor(v);
  CHECK(neg(t).to_vector<int64_t>() == std::vector<int64_t>{0, -5, 7, -(int64_t{1} << 62) - 1, (int64_t{1} << 62) + 1});
  CHECK(abs(t).to_vector<int64_t>() == std::vector<int64_t>{0, 5, 7, (int64_t{1} << 62) + 1, (int64_t{1} << 62) + 1});
  CHECK(relu(t).to_vector<int64_t>() == std::vector<int64_t>{0, 5, 0, (int64_t{1} << 62) + 1, 0});
  CHECK(exp(tensor(std::vector<int32_t>{0, 1})).dtype() == kFloat32);
}

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const auto x = a.to(kFloat64).to_vector<double>(), y = b.to(kFloat64).to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("unary functors give the same values on strided, broadcast and multithreaded inputs") {
  manual_seed(3);
  for (Dtype d : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = (randn({37, 45}) * 3.0).to(d).abs() + 0.25;  // positive: every op is defined
    const Tensor row = narrow(x, 0, 5, 1);                        // {1, 45}
    // Large enough to be split across threads (the grain is 32768 elements), odd-sized.
    const Tensor big = (randn({300001}) * 3.0).to(d).abs() + 0.25;
    for (const auto& c : unary_cases()) {
      CAPTURE(c.name);
      const Tensor y = c.op(x);
      CHECK(same_bits(c.op(test::non_contiguous(x)), y));
      CHECK(same_bits(c.op(x.transpose(0, 1)), y.transpose(0, 1)));
      CHECK(same_bits(c.op(row.expand({37, 45})), c.op(row).expand({37, 45})));
      const Tensor yb = c.op(big);
      bool pieces_match = true;  // each 1000-element slice is run by one thread
      for (int64_t s = 0; s < 300001; s += 29000) {
        const int64_t len = std::min<int64_t>(1000, 300001 - s);
        pieces_match = pieces_match && same_bits(narrow(yb, 0, s, len), c.op(narrow(big, 0, s, len)));
      }
      CHECK(pieces_match);
    }
  }
}

namespace {

double round_to(double v, Dtype d) {
  const float f = static_cast<float>(v);
  if (d == kBFloat16) return BFloat16(f);
  if (d == kFloat16) return Half(f);
  return f;
}

// Special and ordinary values for the binary tests, rounded to d.
std::vector<float> binary_values() {
  return {0.0f, -0.0f, 1.0f, -1.5f, 2.0f, 3.25f, 1e-40f, -1e-40f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, 0.1f, 7.0f};
}

}  // namespace

TEST_CASE("binary functors match float64 exactly rounded, special values included, in every layout") {
  const auto vals = binary_values();
  const auto n = static_cast<int64_t>(vals.size());
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  auto nan_or = [](double a, double b, double r) { return std::isnan(a) || std::isnan(b) ? NAN : r; };
  const std::vector<Case> arith = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [&](double a, double b) { return nan_or(a, b, std::max(a, b)); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [&](double a, double b) { return nan_or(a, b, std::min(a, b)); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](double a, double b) { return double(a == b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](double a, double b) { return double(a != b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](double a, double b) { return double(a < b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](double a, double b) { return double(a <= b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](double a, double b) { return double(a > b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](double a, double b) { return double(a >= b); }},
  };
  for (Dtype d : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    // a varies along rows, b along columns: every pair of values once, through broadcasting.
    const Tensor a = tensor(vals, {n, 1}).to(d), b = tensor(vals, {1, n}).to(d);
    const auto av = a.to(kFloat64).to_vector<double>(), bv = b.to(kFloat64).to_vector<double>();
    for (const auto& c : arith) {
      CAPTURE(c.name);
      const Tensor out = c.op(a, b);
      const bool cmp = out.dtype() == kBool;
      CHECK(out.dtype() == (cmp ? kBool : d));
      // +, -, *, / of two floats rounded once to float32 equal the float64 result rounded to
      // float32 (53 >= 2*24 + 2), so the kernel's float maths must match this exactly.
      std::vector<double> expected(static_cast<size_t>(n * n));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const double r = c.ref(av[i], bv[j]);
          expected[i * n + j] = cmp || d == kFloat64 ? r : round_to(r, d);
        }
      }
      const Tensor full_a = a.expand({n, n}).contiguous(), full_b = b.expand({n, n}).contiguous();
      CHECK(same_bits(out, tensor(expected, {n, n})));
      CHECK(same_bits(c.op(full_a, full_b), out));
      CHECK(same_bits(c.op(test::non_contiguous(full_a), test::non_contiguous(full_b)), out));
      CHECK(same_bits(c.op(full_a.transpose(0, 1), full_b.transpose(0, 1)), out.transpose(0, 1)));
      // A scalar on either side (the stride-0 fast path).
      const Tensor s = tensor(std::vector<float>{2.5f}).to(d).reshape({});
      std::vector<double> with_scalar(static_cast<size_t>(n * n));
      const auto fa = full_a.to(kFloat64).to_vector<double>();
      for (int64_t i = 0; i < n * n; ++i) {
        const double r = c.ref(fa[static_cast<size_t>(i)], 2.5);
        with_scalar[static_cast<size_t>(i)] = cmp || d == kFloat64 ? r : round_to(r, d);
      }
      CHECK(same_bits(c.op(full_a, s), tensor(with_scalar, {n, n})));
    }
  }
}

TEST_CASE("binary functors give the same values when split across threads") {
  manual_seed(4);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor a = randn({300001}).to(d), b = randn({300001}).to(d);
    const Tensor c = randn({1}).to(d);
    for (const auto& op : std::vector<std::function<Tensor(const Tensor&, const Tensor&)>>{
             [](const Tensor&x, const Tensor&y) { return add(x, y, -0.3); },
             [](const Tensor&x, const Tensor&y) { return maximum(x, y); },
             [](const Tensor&x, const Tensor&y) { return div(x, y); },
             [](const Tensor&x, const Tensor&y) { return lt(x, y); }}) {
      for (const Tensor& rhs : {b, c}) {
        const Tensor whole = op(a, rhs);
        bool pieces_match = true;
        for (int64_t s = 0; s < 300001; s += 29000) {
          const int64_t len = std::min<int64_t>(1000, 300001 - s);
          const Tensor r = rhs.numel() == 1 ? rhs : narrow(rhs, 0, s, len);
          pieces_match = pieces_match && same_bits(narrow(whole, 0, s, len), op(narrow(a, 0, s, len), r));
        }
        CHECK(pieces_match);
      }
    }
  }
}
