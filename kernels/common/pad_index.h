// Which input element a padded output element copies, per dim, written once for the CPU and CUDA
// pad kernels. PyTorch's rules: reflect mirrors about the edge element (not repeating it),
// replicate repeats the edge, circular wraps around the input left after any negative pad's crop.
#pragma once

#include <cstdint>

#include "framework/half.h"
#include "framework/ops/pad_kernels.h"

namespace hg::padding {

// o: the output index along a dim of input size n, padded by `before` (after: `after`).
HG_HOST_DEVICE inline int64_t source(int64_t o, int64_t n, int64_t before, int64_t after, PadMode mode) {
  if (mode == PadMode::Circular) {
    const int64_t lo = before < 0 ? -before : 0;
    const int64_t len = n - lo - (after < 0 ? -after : 0);
    int64_t i = (o - (before > 0 ? before : 0)) % len;
    if (i < 0) i += len;
    return i + lo;
  }
  int64_t i = o - before;
  if (mode == PadMode::Reflect) {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
  } else {  // Replicate
    if (i < 0) i = 0;
    if (i >= n) i = n - 1;
  }
  return i;
}

// The flat input offset inside one [in0, in1, in2] plane for flat output offset o of one plane.
HG_HOST_DEVICE inline int64_t source_offset(int64_t o, const PadGeometry& g) {
  const int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
  int64_t at[3];
  const int64_t os[3] = {o0, o1, o2};
  for (int d = 0; d < 3; ++d) {
    const int64_t after = g.out[d] - g.in[d] - g.before[d];
    at[d] = source(os[d], g.in[d], g.before[d], after, g.mode);
  }
  return (at[0] * g.in[1] + at[1]) * g.in[2] + at[2];
}

}  // namespace hg::padding
