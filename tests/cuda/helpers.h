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

// Results that sum rows (softmax, losses, norms, reductions): float32 on both sides but summed in
// a different order, hence looser than the elementwise tolerances.
inline Tolerance row_tolerance(Dtype d) {
  switch (d) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {1e-5, 1e-4};
    case kFloat16: return {2e-3, 2e-3};
    case kBFloat16: return {1.6e-2, 1.6e-2};
    default: return {0, 0};
  }
}

// Forward and input gradients of f (its output summed) on the CPU and on CUDA, compared.
inline void check_with_grad(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, Tolerance tol) {
  auto run = [&](Device dev) {
    std::vector<Tensor> xs;
    for (const Tensor& t : inputs) {
      // detach(): on the CPU, to() returns the input itself, and a leaf marked here would make
      // the CUDA copy a non-leaf (no .grad) on the next run.
      Tensor x = t.detach().to(dev);
      if (t.is_floating_point()) x.requires_grad_();
      xs.push_back(x);
    }
    Tensor y = f(xs);
    y.to(kFloat32).sum().backward();
    std::vector<Tensor> out{y.detach().to(kCPU)};
    for (const Tensor& x : xs)
      if (x.requires_grad()) out.push_back(x.grad().to(kCPU));
    return out;
  };
  const auto cpu = run(kCPU), gpu = run(kCUDA);
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) check_close(gpu[i].to(kFloat64), cpu[i].to(kFloat64), tol);
}

}  // namespace hg::test
