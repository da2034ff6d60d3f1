// Helpers for the cuda suite: run one computation on the CPU and on CUDA from the same inputs
// and compare, with per-dtype tolerances (CUDA maths functions and summation order differ from
// the CPU's by a few ulps).
#pragma once

#include <functional>
#include <vector>

#include "../cpu/helpers.h"

namespace hg::test {

inline std::vector<Tensor> to_cuda(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(kCUDA));
  return out;
}

// Elementwise results: float32 within a few ulps, 16-bit floats within one ulp of their own.
inline Tolerance cuda_tolerance(Dtype d) {
  switch (d) {
    case kFloat64: return {1e-12, 1e-12};
    case kFloat32: return {1e-6, 1e-5};
    case kFloat16: return {1e-3, 1e-3};
    case kBFloat16: return {8e-3, 8e-3};
    default: return {0, 0};
  }
}

// f on CPU inputs and on their CUDA copies; the CUDA result must live on CUDA and match.
inline void check_cuda_matches_cpu(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   const std::vector<Tensor>& cpu_inputs, Tolerance tol) {
  const Tensor expected = f(cpu_inputs);
  const Tensor actual = f(to_cuda(cpu_inputs));
  REQUIRE(actual.device().is_cuda());
  CHECK(actual.dtype() == expected.dtype());
  check_close(actual, expected, tol);
}

}  // namespace hg::test
