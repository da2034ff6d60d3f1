// Helpers for module tests: finite-difference checks of a module's input and parameter
// gradients in float64, and a state_dict round trip through a safetensors file.
#pragma once

#include <filesystem>
#include <functional>

#include "helpers.h"

namespace hg::test {

// Converts `m` to float64 and compares d sum(m(x) * v)/d(x and every parameter) with central
// differences. `before_forward` runs before every forward (e.g. manual_seed for Dropout).
inline void check_module_gradients(nn::Module& m, const Tensor& input, std::function<void()> before_forward = {},
                                   double atol = 1e-6, double rtol = 1e-4) {
  m.to(kFloat64);
  Tensor x = input.is_floating_point() ? input.detach().to(kFloat64).clone().requires_grad_() : input;
  auto run = [&] {
    if (before_forward) before_forward();
    return m.forward(x);
  };
  const Tensor out0 = run();
  Tensor v = rand(out0.shape(), kFloat64) + 0.5;
  auto objective = [&] { return (run() * v).sum(); };
  m.zero_grad();
  objective().backward();
  std::vector<std::pair<std::string, Tensor>> checked = m.named_parameters();
  if (x.is_floating_point()) checked.emplace_back("input", x);
  NoGradGuard no_grad;
  for (auto& entry : checked) {  // not a structured binding: clang 14 cannot capture one in doctest's lambdas
    const std::string& name = entry.first;
    Tensor& t = entry.second;
    REQUIRE_MESSAGE(t.grad().defined(), "no gradient for " << name);
    const auto analytic = t.grad().to_vector<double>();
    auto* data = static_cast<double*>(t.raw_data());
    REQUIRE(t.is_contiguous());
    const double eps = 1e-6;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + eps;
      const double plus = objective().item<double>();
      data[i] = saved - eps;
      const double minus = objective().item<double>();
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic[static_cast<size_t>(i)];
      if (!(std::abs(a - numeric) <= atol + rtol * std::abs(numeric))) {
        FAIL_CHECK(fmt::format("{} element {}: analytic {}, numerical {}", name, i, a, numeric));
        return;
      }
    }
  }
}

// Saves a's state_dict to a file, loads it into b and checks every entry matches.
inline void check_state_dict_round_trip(const nn::Module& a, nn::Module& b) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("hg_nn_{}.safetensors", ::getpid());
  save(a, path.string());
  b.load_state_dict(load(path.string()));
  std::filesystem::remove(path);
  const StateDict sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& entry : sa) {  // not a structured binding: clang 14 cannot capture one in INFO
    const std::string& k = entry.first;
    const Tensor& t = entry.second;
    INFO(k);
    CHECK(sb.at(k).dtype() == t.dtype());
    CHECK(sb.at(k).to_vector<double>() == t.to_vector<double>());
  }
}

// Reads a tensor as float64 values (for hand-written references).
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace hg::test
