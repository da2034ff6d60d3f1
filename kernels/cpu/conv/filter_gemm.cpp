#include "kernels/cpu/conv/filter_gemm.h"

#include <algorithm>
#include <cstring>

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

void filter_gradient_gemm(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, BFloat16* dw, float* db) {
  const int64_t ld = g.n * g.p;
  Workspace<BFloat16> cols(g.ckk * ld), rows(g.o * ld);
  for (int64_t s = 0; s < g.n; ++s) {
    im2col(x + s * g.c * g.h * g.w, cols.data() + s * g.p, g, ld);
    const BFloat16* sample_gy = gy + s * g.o * g.p;
    for (int64_t r = 0; r < g.o; ++r)
      std::memcpy(rows.data() + r * ld + s * g.p, sample_gy + r * g.p, static_cast<size_t>(g.p) * sizeof(BFloat16));
  }
  // dw [o, ckk] = rows [o, ld] @ cols^T, cols read by columns.
  const MatrixView rows_view{g.o, ld, ld, 1}, cols_view{ld, g.ckk, 1, ld};
  Workspace<float> wide(std::max(ld, g.o * g.ckk));
  if (!onednn_matmul(kBFloat16, dw, g.ckk, false, rows.data(), rows_view, cols.data(), cols_view)) {
    Workspace<float> wide_rows(g.o * ld), wide_cols(g.ckk * ld);
    load_run(rows.data(), wide_rows.data(), g.o * ld);
    load_run(cols.data(), wide_cols.data(), g.ckk * ld);
    gemm(false, true, g.o, g.ckk, ld, wide_rows.data(), ld, wide_cols.data(), ld, wide.data(), g.ckk, false);
    store_run(wide.data(), dw, g.o * g.ckk);
  }
  if (db != nullptr)
    for (int64_t r = 0; r < g.o; ++r) {
      load_run(rows.data() + r * ld, wide.data(), ld);
      db[r] = row_sum(wide.data(), ld);
    }
}

}  // namespace hg::cpu
