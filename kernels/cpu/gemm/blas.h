// The library products: OpenBLAS split over halfgrad's pool (blas_gemm), and gemm(), the entry
// point for float32/float64 products inside other kernels (convolution's im2col products, the
// widening path's panels), which asks the router (route.h) for oneDNN or OpenBLAS.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/thread_pool.h"

namespace hg::cpu {

// While alive, OpenBLAS runs each call on the calling thread only. Kernels that split work
// across samples with OpenMP use it: two BLAS thread pools on top of two OpenMP threads would
// fight over the same cores.
class BlasSingleThreadGuard {
 public:
  BlasSingleThreadGuard() : prev_(openblas_get_num_threads()) {
    if (prev_ != 1) openblas_set_num_threads(1);
  }
  ~BlasSingleThreadGuard() {
    if (prev_ != 1) openblas_set_num_threads(prev_);
  }
  BlasSingleThreadGuard(const BlasSingleThreadGuard&) = delete;
  BlasSingleThreadGuard& operator=(const BlasSingleThreadGuard&) = delete;

 private:
  int prev_;
};

// OpenBLAS is set to one thread when the library loads (kernels/cpu/gemm/gemm.cpp): its own thread
// team beside halfgrad's pool made products ~10x slower on busy cores. Large products are split
// by rows of C over halfgrad's pool instead, one single-threaded BLAS call per part (inside a
// pool task, run_parallel runs inline, so kernels that already parallelise are unaffected).
template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  auto rows = [&](int64_t r0, int64_t r1) {
    const T* ar = ta ? a + r0 : a + r0 * lda;
    const auto ota = ta ? CblasTrans : CblasNoTrans, otb = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ota, otb, static_cast<int>(r1 - r0), static_cast<int>(n), static_cast<int>(k), alpha,
                  ar, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c + r0 * ldc, static_cast<int>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ota, otb, static_cast<int>(r1 - r0), static_cast<int>(n), static_cast<int>(k), alpha,
                  ar, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c + r0 * ldc, static_cast<int>(ldc));
    }
  };
  const int64_t parts =
      std::min<int64_t>({num_threads(), m, std::max<int64_t>(1, m * n * k / kGemmThresholds.blas_min_part_work)});
  if (parts <= 1) return rows(0, m);
  run_parallel(parts, [&](int64_t p) { rows(m * p / parts, m * (p + 1) / parts); });
}

// Row-major C = op(A) op(B), or C += op(A) op(B) when `accumulate`, in float or double, on the
// path the router gives a kernel's product (GemmCaller::Kernel): oneDNN's sgemm for float32 where
// it is built in and the product is large enough, else OpenBLAS.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc, bool accumulate) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  const BlasStrides sa = blas_strides(ta, lda), sb = blas_strides(tb, ldb);
  const GemmProblem p{
      m, k, n, sa.row_stride, sa.col_stride, sb.row_stride, sb.col_stride, dtype_of<T>, GemmCaller::Kernel, accumulate};
  if constexpr (std::is_same_v<T, float>) {
    if (route(p) == GemmPath::OneDnn && onednn_matmul(kFloat32, c, ldc, accumulate, a, MatrixView::blas(m, k, ta, lda),
                                                      b, MatrixView::blas(k, n, tb, ldb)))
      return;
  }
  blas_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, T(accumulate ? 1 : 0), c, ldc);
}

}  // namespace hg::cpu
