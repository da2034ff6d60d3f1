#include "kernels/cpu/conv/filter_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {

namespace {

// The column matrix of one GEMM is at most this big; larger batches run as several GEMMs that
// add into dw. 8 MiB keeps a ResNet-18 layer on 3x32x32 (64 channels at 32x32: 2.25 MiB a
// sample) at three samples per GEMM, a reduction 3072 deep, where the GEMM runs at its full rate.
constexpr int64_t kColumnBytes = int64_t{8} << 20;

// One channels-last sample's patches: row q = oy * ow + ox of `rows` ([oh * ow, kh * kw * c]) holds
// the input values under output position q's kernel window, tap by tap, c at a time (zeros outside
// the image).
template <class T>
void im2row_nhwc(const T* x, T* rows, const ConvGeometry& g) {
  const int64_t c = g.c;
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      T* row = rows + (oy * g.ow + ox) * g.ckk;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        const int64_t iy = oy * g.prm.stride[0] - g.prm.padding[0] + ki * g.prm.dilation[0];
        for (int64_t kj = 0; kj < g.kw; ++kj, row += c) {
          const int64_t ix = ox * g.prm.stride[1] - g.prm.padding[1] + kj * g.prm.dilation[1];
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
            std::fill(row, row + c, T(0));
          else
            std::memcpy(row, x + (iy * g.w + ix) * c, static_cast<size_t>(c) * sizeof(T));
        }
      }
    }
}

// dw [m, n] = op(a) [m, k] @ op(b) [k, n] of bfloat16 operands (BLAS's transposes and leading
// dimensions): float32 sums rounded once into a bfloat16 dw, or kept in a float32 one; on oneDNN's
// bfloat16 matmul, or where it has no kernel, on the float32 GEMM over widened copies of the
// operands.
template <class Out>
void bf16_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* b,
                  int64_t ldb, Out* dw) {
  const MatrixView av = MatrixView::blas(m, k, ta, lda), bv = MatrixView::blas(k, n, tb, ldb);
  if constexpr (std::is_same_v<Out, float>) {
    if (onednn_matmul_bf16_widened(dw, n, a, av, b, bv)) return;
  } else {
    if (onednn_matmul(kBFloat16, dw, n, false, a, av, b, bv)) return;
  }
  Workspace<float> wide_a(m * k), wide_b(k * n), wide(std::is_same_v<Out, float> ? 0 : m * n);
  load_run(a, wide_a.data(), m * k);
  load_run(b, wide_b.data(), k * n);
  float* sums = std::is_same_v<Out, float> ? reinterpret_cast<float*>(dw) : wide.data();
  gemm(ta, tb, m, n, k, wide_a.data(), lda, wide_b.data(), ldb, sums, n, false);
  if constexpr (!std::is_same_v<Out, float>) store_run(sums, dw, m * n);
}

}  // namespace

void filter_gradient_gemm_nhwc(const ConvGeometry& g, const float* x, const float* gy, float* dw, float* db) {
  const int64_t sample_cols = g.ckk * g.p;
  const int64_t per = std::clamp<int64_t>(kColumnBytes / static_cast<int64_t>(sample_cols * sizeof(float)), 1, g.n);
  Workspace<float> rows(sample_cols * per);
  for (int64_t s0 = 0; s0 < g.n; s0 += per) {
    const int64_t count = std::min(per, g.n - s0), positions = count * g.p;
    for (int64_t s = 0; s < count; ++s) im2row_nhwc(x + (s0 + s) * g.h * g.w * g.c, rows.data() + s * sample_cols, g);
    const float* gys = gy + s0 * g.p * g.o;  // [positions, o], read transposed
    gemm(true, false, g.o, g.ckk, positions, gys, g.o, rows.data(), g.ckk, dw, g.ckk, s0 > 0);
    if (db != nullptr) column_sums(gys, positions, g.o, db, s0 > 0);
  }
}

namespace {

// The bfloat16 GEMMs above (filter_gemm.h), into a bfloat16 or float32 dw.
template <class Out>
void bf16_filter_gradient_nhwc(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, Out* dw, float* db) {
  const int64_t positions = g.n * g.p;
  Workspace<BFloat16> rows(positions * g.ckk);
  for (int64_t s = 0; s < g.n; ++s) im2row_nhwc(x + s * g.h * g.w * g.c, rows.data() + s * g.p * g.ckk, g);
  // dw [o, ckk] = gy^T [o, positions] @ rows [positions, ckk].
  bf16_product(true, false, g.o, g.ckk, positions, gy, g.o, rows.data(), g.ckk, dw);
  if (db != nullptr) column_sums(gy, positions, g.o, db, false);
}

}  // namespace

ConvGeometry conv_geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw, int64_t oh,
                           int64_t ow, const Conv2dParams& p) {
  ConvGeometry g{};
  g.n = n, g.c = c, g.h = h, g.w = w, g.o = o, g.kh = kh, g.kw = kw, g.oh = oh, g.ow = ow;
  g.groups = 1, g.cg = c, g.og = o, g.ckk = c * kh * kw, g.p = oh * ow, g.prm = p;
  return g;
}

void filter_gradient_gemm(const ConvGeometry& g, const float* x, const float* gy, float* dw, float* db) {
  const int64_t sample_cols = g.ckk * g.p;
  const int64_t per = std::clamp<int64_t>(kColumnBytes / static_cast<int64_t>(sample_cols * sizeof(float)), 1, g.n);
  Workspace<float> cols(sample_cols * per), rows(g.o * g.p * per);
  for (int64_t s0 = 0; s0 < g.n; s0 += per) {
    const int64_t count = std::min(per, g.n - s0), ld = count * g.p;
    for (int64_t s = 0; s < count; ++s) {
      im2col(x + (s0 + s) * g.c * g.h * g.w, cols.data() + s * g.p, g, ld);
      const float* sample_gy = gy + (s0 + s) * g.o * g.p;
      for (int64_t r = 0; r < g.o; ++r)
        std::memcpy(rows.data() + r * ld + s * g.p, sample_gy + r * g.p, static_cast<size_t>(g.p) * sizeof(float));
    }
    gemm(false, true, g.o, g.ckk, ld, rows.data(), ld, cols.data(), ld, dw, g.ckk, s0 > 0);
    if (db != nullptr)
      for (int64_t r = 0; r < g.o; ++r) db[r] = (s0 > 0 ? db[r] : 0.0f) + row_sum(rows.data() + r * ld, ld);
  }
}

namespace {

// The bfloat16 GEMMs above (filter_gemm.h), into a bfloat16 or float32 dw.
template <class Out>
void bf16_filter_gradient(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, Out* dw, float* db) {
  const int64_t ld = g.n * g.p;
  Workspace<BFloat16> cols(g.ckk * ld), rows(g.o * ld);
  for (int64_t s = 0; s < g.n; ++s) {
    im2col(x + s * g.c * g.h * g.w, cols.data() + s * g.p, g, ld);
    const BFloat16* sample_gy = gy + s * g.o * g.p;
    for (int64_t r = 0; r < g.o; ++r)
      std::memcpy(rows.data() + r * ld + s * g.p, sample_gy + r * g.p, static_cast<size_t>(g.p) * sizeof(BFloat16));
  }
  // dw [o, ckk] = rows [o, ld] @ cols^T, cols read by columns.
  bf16_product(false, true, g.o, g.ckk, ld, rows.data(), ld, cols.data(), ld, dw);
  if (db != nullptr) {
    Workspace<float> wide_row(ld);
    for (int64_t r = 0; r < g.o; ++r) {
      load_run(rows.data() + r * ld, wide_row.data(), ld);
      db[r] = row_sum(wide_row.data(), ld);
    }
  }
}

}  // namespace

void filter_gradient_gemm(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, BFloat16* dw, float* db) {
  bf16_filter_gradient(g, x, gy, dw, db);
}
void filter_gradient_gemm(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, float* dw, float* db) {
  bf16_filter_gradient(g, x, gy, dw, db);
}
void filter_gradient_gemm_nhwc(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, BFloat16* dw, float* db) {
  bf16_filter_gradient_nhwc(g, x, gy, dw, db);
}
void filter_gradient_gemm_nhwc(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, float* dw, float* db) {
  bf16_filter_gradient_nhwc(g, x, gy, dw, db);
}

}  // namespace hg::cpu
