// Helpers for CPU kernels that call BLAS from their own parallel loops: scratch buffers taken
// from the caching allocator (a training loop in its steady state makes no system allocations),
// a guard that keeps OpenBLAS single-threaded while the caller parallelises, and typed gemm.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "framework/allocator.h"
#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/thread_pool.h"

namespace hg::cpu {

// An uninitialised array of n T's from the CPU caching allocator, released on scope exit.
template <class T>
class Workspace {
 public:
  explicit Workspace(int64_t n) : bytes_(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)) {
    ptr_ = static_cast<T*>(get_allocator(kCPU)->allocate(bytes_, kCPU));
  }
  ~Workspace() { get_allocator(kCPU)->deallocate(ptr_, bytes_, kCPU); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  T* data() const { return ptr_; }

 private:
  size_t bytes_;
  T* ptr_ = nullptr;
};

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
  constexpr int64_t kMinFlopsPerPart = int64_t{1} << 18;
  const int64_t parts = std::min<int64_t>({num_threads(), m, std::max<int64_t>(1, m * n * k / kMinFlopsPerPart)});
  if (parts <= 1) return rows(0, m);
  run_parallel(parts, [&](int64_t p) { rows(m * p / parts, m * (p + 1) / parts); });
}

// Row-major C = alpha op(A) op(B) + beta C in float or double. float goes to oneDNN where it
// can (alpha 1, beta 0 or 1), else to OpenBLAS.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
      onednn_matmul(kFloat32, c, ldc, beta == 1.0f, a, MatrixView::blas(m, k, ta, lda), b,
                    MatrixView::blas(k, n, tb, ldb)))
    return;
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace hg::cpu
