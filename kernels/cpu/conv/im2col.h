// im2col and col2im for CPU conv2d: a sample's input planes as the column matrix of the
// convolution's GEMM ([in channels x kh x kw, oh x ow]) and back, and the row (NCHW) and column
// (NHWC) sums of a bias's gradient. conv.cpp's own path runs a sample at a time on them; conv/filter_gemm.cpp packs
// several samples side by side for the weight gradient's single GEMM.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "framework/ops/conv_kernels.h"
#include "framework/tensor.h"
#include "kernels/cpu/simd/convert.h"

namespace hg::cpu {

// The shapes of one call; per-group sizes, since every gemm works on one group.
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t groups, cg, og, ckk, p;  // channels per group, outputs per group, kh*kw*cg, oh*ow
  Conv2dParams prm;
  // 1x1 kernels with unit stride and no padding need no packing: the input is the column matrix.
  bool pointwise() const {
    return kh == 1 && kw == 1 && prm.stride[0] == 1 && prm.stride[1] == 1 && prm.padding[0] == 0 && prm.padding[1] == 0;
  }
};

inline ConvGeometry conv_geometry(const Tensor& input, const Tensor& weight, int64_t oh, int64_t ow,
                                  const Conv2dParams& p) {
  ConvGeometry g{};
  g.n = input.size(0), g.c = input.size(1), g.h = input.size(2), g.w = input.size(3);
  g.o = weight.size(0), g.kh = weight.size(2), g.kw = weight.size(3), g.oh = oh, g.ow = ow;
  g.groups = p.groups, g.cg = g.c / p.groups, g.og = g.o / p.groups;
  g.ckk = g.cg * g.kh * g.kw, g.p = oh * ow, g.prm = p;
  return g;
}

// For kernel column kj, the output columns [lo, hi) whose input column lies inside the image.
struct ColRange {
  int64_t lo, hi, off;  // input column of output column ow is ow * stride + off
};
inline ColRange col_range(const ConvGeometry& g, int64_t kj) {
  const int64_t sw = g.prm.stride[1], off = kj * g.prm.dilation[1] - g.prm.padding[1];
  int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
  int64_t hi = g.w - 1 - off < 0 ? 0 : std::min(g.ow, (g.w - 1 - off) / sw + 1);
  lo = std::min(lo, hi);
  return {lo, hi, off};
}

// dst[i] = Acc(src[i]) for i < n. im2col copies one output row per call (24 floats in the MNIST
// CNN): a variable-length loop pays its alias check and remainder per call, while fixed-size
// blocks compile to whole-vector moves (1.5x faster im2col in isolation). 16-bit inputs are
// widened by load_run.
template <class T, class Acc>
inline void copy_run(const T* __restrict src, Acc* __restrict dst, int64_t n) {
  if constexpr (std::is_same_v<T, Acc>) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) std::memcpy(dst + i, src + i, 16 * sizeof(Acc));
    if (i + 8 <= n) std::memcpy(dst + i, src + i, 8 * sizeof(Acc)), i += 8;
    if (i + 4 <= n) std::memcpy(dst + i, src + i, 4 * sizeof(Acc)), i += 4;
    for (; i < n; ++i) dst[i] = src[i];
  } else {
    load_run(src, dst, n);
  }
}

// col [cg*kh*kw, oh*ow] from one group's input planes x [cg, h, w]; column row r starts at
// col + r * ld (ld = oh*ow by default; the weight gradient's GEMM puts several samples side by
// side in one row).
template <class T, class Acc>
void im2col(const T* x, Acc* col, const ConvGeometry& g, int64_t ld = 0) {
  if (ld == 0) ld = g.p;
  const int64_t sh = g.prm.stride[0], sw = g.prm.stride[1];
  if (sh == 1 && sw == 1 && g.prm.padding[0] == 0 && g.prm.padding[1] == 0 && g.prm.dilation[0] == 1 &&
      g.prm.dilation[1] == 1) {
    // Unit stride, no padding (the MNIST CNN): every column row is ow-long straight copies.
    for (int64_t c = 0; c < g.cg; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          Acc* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
          const T* src = x + (c * g.h + ki) * g.w + kj;
          for (int64_t oy = 0; oy < g.oh; ++oy) copy_run(src + oy * g.w, row + oy * g.ow, g.ow);
        }
    return;
  }
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        Acc* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
        const ColRange r = col_range(g, kj);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          Acc* dst = row + oy * g.ow;
          const int64_t iy = oy * sh - g.prm.padding[0] + ki * g.prm.dilation[0];
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.ow, Acc(0));
            continue;
          }
          const T* src = x + (c * g.h + iy) * g.w;
          std::fill(dst, dst + r.lo, Acc(0));
          if (sw == 1) {
            copy_run(src + r.lo + r.off, dst + r.lo, r.hi - r.lo);
          } else {
            for (int64_t ox = r.lo; ox < r.hi; ++ox) dst[ox] = static_cast<Acc>(src[ox * sw + r.off]);
          }
          std::fill(dst + r.hi, dst + g.ow, Acc(0));
        }
      }
    }
  }
}

// dx [cg, h, w] += the column gradient scattered back to the pixels it was packed from.
template <class Acc>
void col2im(const Acc* col, Acc* dx, const ConvGeometry& g) {
  const int64_t sh = g.prm.stride[0], sw = g.prm.stride[1];
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const Acc* row = col + ((c * g.kh + ki) * g.kw + kj) * g.p;
        const ColRange r = col_range(g, kj);
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * sh - g.prm.padding[0] + ki * g.prm.dilation[0];
          if (iy < 0 || iy >= g.h) continue;
          const Acc* src = row + oy * g.ow;
          Acc* dst = dx + (c * g.h + iy) * g.w;
          if (sw == 1) {
            for (int64_t ox = r.lo; ox < r.hi; ++ox) dst[ox + r.off] += src[ox];
          } else {
            for (int64_t ox = r.lo; ox < r.hi; ++ox) dst[ox * sw + r.off] += src[ox];
          }
        }
      }
    }
  }
}

// The sum of v[0, n) in kLanes interleaved partial sums: a single running sum is a chain of
// dependent adds the compiler may not reorder (4-cycle latency each); the lanes vectorise.
template <class Acc>
Acc row_sum(const Acc* v, int64_t n) {
  constexpr int64_t kLanes = 16;
  Acc part[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += v[j + l];
  Acc s = 0;
  for (; j < n; ++j) s += v[j];
  for (int64_t l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

// db[o] = the sum of gy's column o over `positions` rows of o values (a channels-last output
// gradient's bias sums), widened to float32; added to db with `accumulate`.
template <class T>
void column_sums(const T* gy, int64_t positions, int64_t o, float* db, bool accumulate) {
  std::vector<float> acc(static_cast<size_t>(o), 0.0f), row(static_cast<size_t>(o));
  for (int64_t p = 0; p < positions; ++p) {
    load_run(gy + p * o, row.data(), o);
    for (int64_t j = 0; j < o; ++j) acc[static_cast<size_t>(j)] += row[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < o; ++j) db[j] = (accumulate ? db[j] : 0.0f) + acc[static_cast<size_t>(j)];
}

}  // namespace hg::cpu
