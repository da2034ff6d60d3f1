// PyTorch's coordinate maps for 2-d upsampling, written once for the CPU and CUDA kernels (the
// formulas of ATen's UpSample.h; the arithmetic types follow it so indices match bit for bit:
// nearest in float, bilinear in float for 16-bit and float32 data, double for float64).
#pragma once

#include <cmath>
#include <cstdint>

#include "framework/half.h"

namespace hg::interp {

// The source step per output pixel: (in - 1) / (out - 1) with align_corners (0 for one output),
// else 1 / scale_factor when the caller passed one (scale > 0), else in / out.
template <class A>
HG_HOST_DEVICE inline A step(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  return scale > 0 ? static_cast<A>(1.0 / scale) : static_cast<A>(in) / static_cast<A>(out);
}

// nearest: floor(dst * step), clamped to the last pixel.
HG_HOST_DEVICE inline int64_t nearest_source(int64_t o, int64_t in, float step) {
  const auto i = static_cast<int64_t>(std::floor(static_cast<float>(o) * step));
  return i < in - 1 ? i : in - 1;
}

// bilinear: output o reads i0 with weight l0 and i1 (i0 or i0 + 1) with weight l1.
template <class A>
struct LinearTap {
  int64_t i0, i1;
  A l0, l1;
};
template <class A>
HG_HOST_DEVICE inline LinearTap<A> linear_source(int64_t o, int64_t in, A step, bool align_corners) {
  A src = align_corners ? step * static_cast<A>(o) : step * (static_cast<A>(o) + A(0.5)) - A(0.5);
  if (src < A(0)) src = A(0);
  const auto i0 = static_cast<int64_t>(src);
  const int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
  A l1 = src - static_cast<A>(i0);
  if (l1 > A(1)) l1 = A(1);
  return {i0, i1, A(1) - l1, l1};
}

}  // namespace hg::interp
