// nn::init's xavier_*, kaiming_* (fan modes, nonlinearities) and trunc_normal_: the bounds and
// standard deviations of torch.nn.init's formulas, checked on large samples, and calculate_gain
// against PyTorch 1.13.
#include <algorithm>
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;
namespace init = hg::nn::init;

namespace {
struct Stats {
  double mean, std, max_abs, lo, hi;
};
Stats stats(const Tensor& t) {
  const auto v = t.to_vector<double>();
  double s = 0, ss = 0, m = 0, lo = INFINITY, hi = -INFINITY;
  for (double x : v) s += x, ss += x * x, m = std::max(m, std::abs(x)), lo = std::min(lo, x), hi = std::max(hi, x);
  const double n = static_cast<double>(v.size()), mean = s / n;
  return {mean, std::sqrt(ss / n - mean * mean), m, lo, hi};
}
}  // namespace

TEST_CASE("calculate_gain matches PyTorch's") {
  // torch.nn.init.calculate_gain('leaky_relu'), ('leaky_relu', 0.2), ('tanh'), ('selu').
  CHECK(init::calculate_gain("leaky_relu") == doctest::Approx(1.4141428569978354).epsilon(1e-15));
  CHECK(init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(1.3867504905630728).epsilon(1e-15));
  CHECK(init::calculate_gain("tanh") == doctest::Approx(1.6666666666666667));
  CHECK(init::calculate_gain("selu") == 0.75);
  CHECK(init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain("conv2d") == 1.0);
  check_error([] { init::calculate_gain("swish"); }, {"[calculate_gain]", "swish"});
}

TEST_CASE("xavier and kaiming initialisers use PyTorch's bounds and standard deviations") {
  manual_seed(81);
  // A [200, 50, 3, 3] conv weight: fan_in 450, fan_out 1800.
  Tensor w = empty({200, 50, 3, 3});
  const double fan_in = 450, fan_out = 1800;
  init::xavier_uniform_(w, 2.0);
  double bound = 2.0 * std::sqrt(6.0 / (fan_in + fan_out));
  Stats s = stats(w);
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > 0.999 * bound);
  CHECK(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));
  init::xavier_normal_(w);
  CHECK(stats(w).std == doctest::Approx(std::sqrt(2.0 / (fan_in + fan_out))).epsilon(0.01));
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanOut, "relu");
  bound = std::sqrt(2.0) * std::sqrt(3.0 / fan_out);
  s = stats(w);
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > 0.999 * bound);
  // PyTorch's Linear/Conv default: kaiming_uniform_(w, a=sqrt(5)) gives 1 / sqrt(fan_in).
  init::kaiming_uniform_(w, std::sqrt(5.0));
  CHECK(stats(w).max_abs <= 1 / std::sqrt(fan_in));
  init::kaiming_normal_(w, 0.0, init::FanMode::FanIn, "relu");
  CHECK(stats(w).std == doctest::Approx(std::sqrt(2.0 / fan_in)).epsilon(0.01));
  init::kaiming_normal_(w, 0.2, init::FanMode::FanOut);  // leaky_relu with slope 0.2
  CHECK(stats(w).std == doctest::Approx(1.3867504905630728 / std::sqrt(fan_out)).epsilon(0.01));
  // Works on any floating dtype, leaves autograd alone.
  Tensor h = empty({64, 64}, kBFloat16).requires_grad_(true);
  init::xavier_uniform_(h);
  CHECK(h.dtype() == kBFloat16);
  CHECK(h.is_leaf());
  check_error(
      [] {
        Tensor v = empty({5});
        init::xavier_uniform_(v);
      },
      {"[xavier_uniform_]", "at least 2 dims"});
  check_error(
      [] {
        Tensor v = empty({5});
        init::kaiming_normal_(v);
      },
      {"[kaiming_normal_]", "at least 2 dims"});
}

TEST_CASE("trunc_normal_ stays inside [a, b] with the truncated normal's moments") {
  manual_seed(82);
  Tensor t = empty({400, 250});
  init::trunc_normal_(t, 0.0, 1.0, -2.0, 2.0);
  Stats s = stats(t);
  CHECK(s.lo >= -2.0);
  CHECK(s.hi <= 2.0);
  CHECK(std::abs(s.mean) < 0.01);
  // Var of N(0, 1) truncated to [-2, 2]: 1 - 4 phi(2) / (Phi(2) - Phi(-2)) = 0.77374 (std 0.87962).
  CHECK(s.std == doctest::Approx(0.87962).epsilon(0.01));
  // An asymmetric window, shifted mean: every value lands in it.
  init::trunc_normal_(t, 1.0, 0.5, 1.2, 1.4);
  s = stats(t);
  CHECK(s.lo >= 1.2);
  CHECK(s.hi <= 1.4);
  check_error([&] { init::trunc_normal_(t, 0.0, 1.0, 2.0, -2.0); }, {"[trunc_normal_]", "a < b"});
}
