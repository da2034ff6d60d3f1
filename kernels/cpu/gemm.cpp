// CPU matrix multiply through OpenBLAS. float16/bfloat16 operands are widened to float32 once
// (in parallel), multiplied by sgemm with float32 accumulation, and the result rounded once.
#include <cblas.h>

#include <vector>

#include "framework/ops/matmul.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

// How BLAS should read a [rows, cols] matrix with the given element strides.
struct BlasView {
  bool transposed = false;
  int64_t ld = 0;
  bool usable = false;
};
BlasView blas_view(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows <= 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {false, std::max<int64_t>(row_stride, std::max<int64_t>(cols, 1)), true};
  if (row_stride == 1 && (cols <= 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {true, std::max<int64_t>(col_stride, std::max<int64_t>(rows, 1)), true};
  return {};
}

// Copies a strided [rows, cols] matrix into a dense row-major float buffer.
template <class T>
void widen(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* in = src + r * rs;
      float* out = dst + r * cols;
      if (cs == 1) {
        for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(in[c]);
      } else {
        for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(in[c * cs]);
      }
    }
  });
}

template <class T>
void gemm_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const int64_t sa0 = a.strides()[0], sa1 = a.strides()[1], sa2 = a.strides()[2];
  const int64_t sb0 = b.strides()[0], sb1 = b.strides()[1], sb2 = b.strides()[2];
  if (k == 0) {
    for (int64_t i = 0; i < batch * m * n; ++i) po[i] = T(0);
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const BlasView va = blas_view(m, k, sa1, sa2), vb = blas_view(k, n, sb1, sb2);
    if (va.usable && vb.usable) {
      for (int64_t i = 0; i < batch; ++i) {
        const auto ta = va.transposed ? CblasTrans : CblasNoTrans, tb = vb.transposed ? CblasTrans : CblasNoTrans;
        if constexpr (std::is_same_v<T, float>) {
          cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, pa + i * sa0, va.ld, pb + i * sb0, vb.ld, 0.0f,
                      po + i * m * n, n);
        } else {
          cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, pa + i * sa0, va.ld, pb + i * sb0, vb.ld, 0.0,
                      po + i * m * n, n);
        }
      }
      return;
    }
    if constexpr (std::is_same_v<T, double>) {
      fail("gemm", "float64 operands with unsupported strides should have been made contiguous");
    }
  }
  // Widen (or densify) to float32 and multiply with sgemm.
  std::vector<float> fa(static_cast<size_t>(m * k)), fb(static_cast<size_t>(k * n)), fo;
  const bool out_is_float = std::is_same_v<T, float>;
  if (!out_is_float) fo.resize(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < batch; ++i) {
    widen(pa + i * sa0, m, k, sa1, sa2, fa.data());
    widen(pb + i * sb0, k, n, sb1, sb2, fb.data());
    float* dst = out_is_float ? reinterpret_cast<float*>(po + i * m * n) : fo.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, fa.data(), k, fb.data(), n, 0.0f, dst, n);
    if (!out_is_float) {
      T* o = po + i * m * n;
      parallel_for(m * n, kParallelGrain, [&](int64_t b0, int64_t e0) {
        for (int64_t j = b0; j < e0; ++j) o[j] = T(fo[static_cast<size_t>(j)]);
      });
    }
  }
}

void gemm_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor aa = a, bb = b;
  if (a.dtype() == kFloat64) {  // dgemm has no widening path: make odd layouts contiguous
    if (!blas_view(a.shape()[1], a.shape()[2], a.strides()[1], a.strides()[2]).usable) aa = a.contiguous();
    if (!blas_view(b.shape()[1], b.shape()[2], b.strides()[1], b.strides()[2]).usable) bb = b.contiguous();
  }
  dispatch_floating(a.dtype(), "mm", [&]<class T>(TypeTag<T>) { gemm_typed<T>(out, aa, bb); });
}

}  // namespace

HG_REGISTER_KERNEL(gemm_stub, kCPU, gemm_cpu);

}  // namespace hg::cpu
