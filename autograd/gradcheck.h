// Checks analytic gradients (gradcheck) and second derivatives (gradgradcheck) against float64
// central differences.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "framework/tensor.h"

namespace hg::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// The names of the ops whose backward nodes some gradcheck so far in this process reached from
// its output (the test suite uses it to find differentiable ops that no test checks).
std::set<std::string> gradchecked_ops();

// Runs fn on float64 copies of `inputs` (the floating ones require grad) and compares the
// gradient of sum(fn(x) * v), for a fixed random v, with central differences, element by
// element. Returns true, or throws hg::Error naming the input, element and both values.
bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
               GradcheckOptions options = {});

// The names of the ops whose backward nodes some gradgradcheck so far in this process reached
// (their formulas were recorded and differentiated again).
std::set<std::string> gradgradchecked_ops();

// Second derivatives, as PyTorch's gradgradcheck: with float64 copies x of the inputs and a fixed
// pseudo-random v of the output's shape, the vector-Jacobian product G(x, v) = d(sum(fn(x) * v))/dx
// is computed with create_graph; the gradient of sum(G * u), for a fixed u, with respect to x and
// v is compared with central differences of G. Returns true or throws hg::Error naming the
// variable (input k, or the output gradient), element and both values.
bool gradgradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                   GradcheckOptions options = {});

}  // namespace hg::autograd
