// Shared test helpers: float64 references, per-dtype tolerances, non-contiguous inputs.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include <halfgrad.h>

namespace hg::test {

// Tolerance for results computed in `dtype`, compared with a float64 reference.
struct Tolerance {
  double atol, rtol;
};
inline Tolerance tolerance(Dtype dtype) {
  switch (dtype) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {1e-5, 1e-5};
    case kFloat16: return {2e-3, 2e-3};
    case kBFloat16: return {1.6e-2, 1.6e-2};
    default: return {0, 0};
  }
}

// Checks |actual - expected| <= atol + rtol |expected| element by element; NaN never passes
// unless both are NaN. Reports the first bad element.
inline void check_close(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE_MESSAGE(actual.shape() == expected.shape(),
                  fmt::format("shape {} vs expected {}", actual.shape(), expected.shape()));
  const auto a = actual.to_vector<double>();
  const auto e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool ok = both_nan || (a[i] == e[i]) || std::abs(a[i] - e[i]) <= tol.atol + tol.rtol * std::abs(e[i]);
    if (!ok) {
      FAIL_CHECK(fmt::format("element {}: got {}, expected {} (atol {}, rtol {})", i, a[i], e[i], tol.atol, tol.rtol));
      return;
    }
  }
}
inline void check_close(const Tensor& actual, const Tensor& expected) {
  check_close(actual, expected, tolerance(actual.dtype()));
}

// Same dtype, shape and bytes (NaN payloads and the sign of zero included).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * element_size(ca.dtype())) == 0;
}

// The same values as `t`, laid out non-contiguously (a transposed copy transposed back).
inline Tensor non_contiguous(const Tensor& t) {
  if (t.dim() < 2) {
    Tensor wide = zeros({t.numel() * 2}, TensorOptions(t.dtype()));
    Tensor view = wide.slice(0, 0, t.numel() * 2, 2).reshape(t.shape());
    view.copy_(t.detach());
    return view;
  }
  Tensor c = t.detach().transpose(-1, -2).contiguous().transpose(-1, -2);
  return c;
}

// A fresh, empty directory for one test's files (per process, so parallel runs don't collide).
inline std::filesystem::path temp_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("hg_test_{}_{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Checks that fn throws hg::Error whose message contains every fragment.
template <class F>
void check_error(F&& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    FAIL_CHECK("expected an hg::Error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) CHECK_MESSAGE(msg.find(f) != std::string::npos, "message: " << msg);
  }
}

}  // namespace hg::test
