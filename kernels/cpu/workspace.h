// Helpers for CPU kernels that call BLAS from their own parallel loops: scratch buffers taken
// from the caching allocator (a training loop in its steady state makes no system allocations),
// a guard that keeps OpenBLAS single-threaded while the caller parallelises, and typed gemm.
#pragma once

#include <cblas.h>

#include <cstddef>
#include <cstdint>

#include "framework/allocator.h"
#include "kernels/cpu/onednn_matmul.h"

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

// Row-major C = alpha op(A) op(B) + beta C in float or double. float goes to oneDNN where it
// can (alpha 1, beta 0 or 1), else to OpenBLAS.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
      onednn_matmul(kFloat32, c, ldc, beta == 1.0f, a, MatrixView::blas(m, k, ta, lda), b,
                    MatrixView::blas(k, n, tb, ldb)))
    return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

}  // namespace hg::cpu
