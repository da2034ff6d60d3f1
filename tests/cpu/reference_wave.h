// The inputs tests/tools/ops2_reference.py builds its PyTorch reference numbers from:
// v[i] = sin(a + b i) (or cos), float64, in the given shape.
#pragma once

#include <cmath>
#include <vector>

#include "helpers.h"

namespace hg::test {

inline Tensor reference_wave(const Shape& shape, double a, double b, bool cosine = false) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double t = a + b * static_cast<double>(i);
    v[i] = cosine ? std::cos(t) : std::sin(t);
  }
  return tensor(v, shape);
}

}  // namespace hg::test
