// CPU matrix multiply. float32 and bfloat16 go to oneDNN's matmul where it is built in (for
// bfloat16: where this CPU multiplies bfloat16 natively; kernels/cpu/onednn_matmul.h). Other
// 16-bit products run on the float32 kernels, widened a panel at a time while they are packed
// (kernels/cpu/widening_gemm.h), or, with a short inner dimension, on short_inner_gemm. float64
// and float32 operands in layouts BLAS cannot read go to OpenBLAS (float32 ones made dense
// first).
#include <cblas.h>

#include <array>

#include "framework/ops/matmul_kernels.h"
#include "kernels/common/blas_layout.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/short_inner_gemm.h"
#include "kernels/cpu/widening_gemm.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// At load: OpenBLAS computes on the calling thread only; blas_gemm (workspace.h) spreads large
// products over halfgrad's pool.
[[maybe_unused]] const bool g_blas_one_thread = [] {
  openblas_set_num_threads(1);
  return true;
}();

// Copies a strided [rows, cols] float32 matrix into a dense row-major buffer.
void densify(const float* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[r * rs + c * cs];
  });
}

// A dense copy of one [rows, cols] float32 operand in the operand's own memory order: a
// transposed operand is copied as it is stored and handed to sgemm as transposed, so the copy
// reads memory in order. The buffer comes from the caching allocator.
struct DenseOperand {
  Workspace<float> buf;
  bool transposed = false;
  int64_t ld = 0;
  DenseOperand(int64_t rows, int64_t cols) : buf(rows * cols) {}
  void fill(const float* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    const BlasLayout v = blas_layout(rows, cols, rs, cs);
    transposed = v.usable && v.transposed;
    if (transposed) {
      densify(src, cols, rows, cs, 1, buf.data());  // stored as [cols, rows]
      ld = rows;
    } else {
      densify(src, rows, cols, rs, cs, buf.data());
      ld = cols;
    }
  }
};

// The oneDNN path (float32 and bfloat16), one matrix of the batch at a time; false when it does
// not apply (then nothing was written).
template <class T>
bool onednn_gemm(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n,
                 std::array<int64_t, 3> sa, std::array<int64_t, 3> sb) {
  constexpr Dtype dtype = std::is_same_v<T, float> ? kFloat32 : kBFloat16;
  if (m == 0 || n == 0 || !onednn_matmul_enabled(dtype)) return false;
  const BlasLayout va = blas_layout(m, k, sa[1], sa[2]), vb = blas_layout(k, n, sb[1], sb[2]);
  if (!va.usable || !vb.usable) return false;
  const MatrixView ma = MatrixView::blas(m, k, va.transposed, va.ld), mb = MatrixView::blas(k, n, vb.transposed, vb.ld);
  for (int64_t i = 0; i < batch; ++i) {
    // Every matrix of the batch has the same problem, so oneDNN takes all of them or none.
    if (!onednn_matmul(dtype, po + i * m * n, n, false, pa + i * sa[0], ma, pb + i * sb[0], mb)) return false;
  }
  return true;
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
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    if (use_short_inner_gemm(m, k, n)) {
      for (int64_t i = 0; i < batch; ++i)
        short_inner_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n);
      return;
    }
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
    if (onednn_gemm(po, pa, pb, batch, m, k, n, {sa0, sa1, sa2}, {sb0, sb1, sb2})) return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const BlasLayout va = blas_layout(m, k, sa1, sa2), vb = blas_layout(k, n, sb1, sb2);
    if (va.usable && vb.usable) {
      for (int64_t i = 0; i < batch; ++i) {
        blas_gemm<T>(va.transposed, vb.transposed, m, n, k, T(1), pa + i * sa0, va.ld, pb + i * sb0, vb.ld, T(0),
                     po + i * m * n, n);
      }
      return;
    }
    if constexpr (std::is_same_v<T, double>) {
      fail("gemm", "float64 operands with unsupported strides should have been made contiguous");
    }
  }
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    for (int64_t i = 0; i < batch; ++i)
      widening_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n);
  } else if constexpr (std::is_same_v<T, float>) {
    // float32 in a layout BLAS cannot read: made dense, then the float32 product's own path.
    DenseOperand fa(m, k), fb(k, n);
    for (int64_t i = 0; i < batch; ++i) {
      fa.fill(pa + i * sa0, m, k, sa1, sa2);
      fb.fill(pb + i * sb0, k, n, sb1, sb2);
      gemm(fa.transposed, fb.transposed, m, n, k, 1.0f, fa.buf.data(), fa.ld, fb.buf.data(), fb.ld, 0.0f,
           po + i * m * n, n);
    }
  }
}

void gemm_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor aa = a, bb = b;
  if (a.dtype() == kFloat64) {  // dgemm has no widening path: make odd layouts contiguous
    if (!blas_layout(a.shape()[1], a.shape()[2], a.strides()[1], a.strides()[2]).usable) aa = a.contiguous();
    if (!blas_layout(b.shape()[1], b.shape()[2], b.strides()[1], b.strides()[2]).usable) bb = b.contiguous();
  }
  dispatch_floating(a.dtype(), "mm", [&]<class T>(TypeTag<T>) { gemm_typed<T>(out, aa, bb); });
}

}  // namespace

HG_REGISTER_KERNEL(gemm_stub, kCPU, gemm_cpu);

}  // namespace hg::cpu
