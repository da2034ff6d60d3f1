// CPU matrix multiply. Products with a few rows against a large weight (a linear layer at a
// small batch) run on narrow_gemm in every float dtype but float64, and so do 16-bit products
// that would otherwise be widened with few rows or few columns against a smaller operand
// (kernels/cpu/gemm/narrow.h).
// Otherwise float32 and bfloat16 go to oneDNN's matmul where it is built in (for bfloat16: where
// this CPU multiplies bfloat16 natively; kernels/cpu/gemm/onednn.h). Other 16-bit products
// run on float32 arithmetic, widened a panel at a time while they are packed
// (kernels/cpu/gemm/widening.h), or, with a short inner dimension, on short_inner_gemm. float64
// and float32 operands in layouts BLAS cannot read go to OpenBLAS (float32 ones made dense
// first).
#include <cblas.h>

#include <array>
#include <vector>

#include "framework/ops/matmul_kernels.h"
#include "kernels/common/blas_layout.h"
#include "kernels/cpu/gemm/narrow.h"
#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/gemm/short_inner.h"
#include "kernels/cpu/gemm/widening.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// At load: OpenBLAS computes on the calling thread only; blas_gemm (workspace.h) spreads large
// products over halfgrad's pool.
[[maybe_unused]] const bool g_blas_one_thread = [] {
  openblas_set_num_threads(1);
  return true;
}();

// The oneDNN path (float32 and bfloat16), one matrix of the batch at a time; false when it does
// not apply (then nothing was written).
template <class T>
bool onednn_gemm(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n,
                 std::array<int64_t, 3> sa, std::array<int64_t, 3> sb, const T* bias) {
  constexpr Dtype dtype = std::is_same_v<T, float> ? kFloat32 : kBFloat16;
  if (m == 0 || n == 0 || !onednn_matmul_enabled(dtype)) return false;
  const BlasLayout va = blas_layout(m, k, sa[1], sa[2]), vb = blas_layout(k, n, sb[1], sb[2]);
  if (!va.usable || !vb.usable) return false;
  const MatrixView ma = MatrixView::blas(m, k, va.transposed, va.ld), mb = MatrixView::blas(k, n, vb.transposed, vb.ld);
  for (int64_t i = 0; i < batch; ++i) {
    // Every matrix of the batch has the same problem, so oneDNN takes all of them or none.
    if (!onednn_matmul(dtype, po + i * m * n, n, false, pa + i * sa[0], ma, pb + i * sb[0], mb, bias)) return false;
  }
  return true;
}

// out[i, j] += bias[j] over an [m, n] row-major out, in the accumulation type and rounded once
// (the broadcast add linear would otherwise run).
template <class T>
void add_bias_rows(T* out, int64_t m, int64_t n, const T* bias) {
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* row = out + r * n;
      for (int64_t j = 0; j < n; ++j)
        row[j] = static_cast<T>(static_cast<acc_t<T>>(row[j]) + static_cast<acc_t<T>>(bias[j]));
    }
  });
}

// Whether a T product's library path widens its operands into float32 copies: float16, and
// bfloat16 where this CPU has no bfloat16 units (oneDNN's bfloat16 matmul is off).
template <class T>
bool product_widens() {
  if constexpr (std::is_same_v<T, Half>) return true;
  if constexpr (std::is_same_v<T, BFloat16>) return !onednn_matmul_enabled(kBFloat16);
  return false;
}

// out[i] = a[i] @ b[i] for the batch, plus a dense row vector bias when one is given (batch 1).
template <class T>
void gemm_raw(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n, int64_t sa0, int64_t sa1,
              int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2, const T* bias);

template <class T>
void gemm_raw(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n, int64_t sa0, int64_t sa1,
              int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2, const T* bias);

template <class T>
void gemm_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm_raw(static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
           a.shape()[0], a.shape()[1], a.shape()[2], b.shape()[2], a.strides()[0], a.strides()[1], a.strides()[2],
           b.strides()[0], b.strides()[1], b.strides()[2], static_cast<const T*>(nullptr));
}

template <class T>
void gemm_raw(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n, int64_t sa0, int64_t sa1,
              int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2, const T* bias) {
  // The paths that add the bias inside the product (oneDNN's bfloat16 kernels, the widening
  // one) take it; the others leave it to add_bias_rows afterwards.
  const auto finish = [&] {
    if (bias != nullptr) add_bias_rows(po, m, n, bias);
  };
  if (k == 0) {
    for (int64_t i = 0; i < batch * m * n; ++i) po[i] = T(0);
    return finish();
  }
  if constexpr (!std::is_same_v<T, double>) {
    const bool widens = product_widens<T>();
    if (use_narrow_gemm(m, k, n, sb1, sb2, widens)) {
      for (int64_t i = 0; i < batch; ++i)
        narrow_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n, bias);
      return;
    }
    if (use_narrow_gemm_transposed(m, k, n, sa2, widens) ||
        (std::is_same_v<T, float> && use_narrow_float_dots(m, k, n, sa2))) {
      for (int64_t i = 0; i < batch; ++i)
        narrow_gemm_transposed(po + i * m * n, pa + i * sa0, sa1, pb + i * sb0, sb1, sb2, m, k, n, bias);
      return;
    }
  }
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    if (use_short_inner_gemm(m, k, n)) {
      for (int64_t i = 0; i < batch; ++i)
        short_inner_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n);
      return finish();
    }
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (onednn_gemm(po, pa, pb, batch, m, k, n, {sa0, sa1, sa2}, {sb0, sb1, sb2}, bias)) return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_gemm(po, pa, pb, batch, m, k, n, {sa0, sa1, sa2}, {sb0, sb1, sb2}, static_cast<const float*>(nullptr)))
      return finish();
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const BlasLayout va = blas_layout(m, k, sa1, sa2), vb = blas_layout(k, n, sb1, sb2);
    if (va.usable && vb.usable) {
      for (int64_t i = 0; i < batch; ++i) {
        blas_gemm<T>(va.transposed, vb.transposed, m, n, k, T(1), pa + i * sa0, va.ld, pb + i * sb0, vb.ld, T(0),
                     po + i * m * n, n);
      }
      return finish();
    }
    if constexpr (std::is_same_v<T, double>) {
      fail("gemm", "float64 operands with unsupported strides should have been made contiguous");
    }
  }
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    for (int64_t i = 0; i < batch; ++i)
      widening_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n, bias);
  } else if constexpr (std::is_same_v<T, float>) {
    // float32 in a layout BLAS cannot read: made dense, then the float32 product's own path.
    Workspace<float> fa(m * k), fb(k * n);
    for (int64_t i = 0; i < batch; ++i) {
      const WidenedMatrix da = widen_matrix(pa + i * sa0, m, k, sa1, sa2, fa.data());
      const WidenedMatrix db = widen_matrix(pb + i * sb0, k, n, sb1, sb2, fb.data());
      gemm(da.transposed, db.transposed, m, n, k, 1.0f, fa.data(), da.ld, fb.data(), db.ld, 0.0f, po + i * m * n, n);
    }
    finish();
  }
}

// t itself, or for a float64 matrix (the last two dims) in a layout BLAS cannot read, a
// contiguous copy: dgemm has no dense-copy path of its own.
Tensor dgemm_readable(const Tensor& t) {
  const int64_t d = t.dim() - 2;
  if (t.dtype() != kFloat64 || blas_layout(t.shape()[d], t.shape()[d + 1], t.strides()[d], t.strides()[d + 1]).usable)
    return t;
  return t.contiguous();
}

void gemm_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor aa = dgemm_readable(a), bb = dgemm_readable(b);
  dispatch_floating(a.dtype(), "mm", [&]<class T>(TypeTag<T>) { gemm_typed<T>(out, aa, bb); });
}

// linear's forward: out = a @ b + bias, the bias added to the float32 sums before their one
// rounding where the product runs on oneDNN's bfloat16 kernels or the widening path (one pass
// fewer over the output than a GEMM and a broadcast add), after the product elsewhere.
void gemm_bias_cpu(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  HG_CHECK(out.is_contiguous() && a.dim() == 2 && b.dim() == 2 && bias.dim() == 1, "linear",
           "expected 2-d operands, a 1-d bias and a contiguous output");
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (m == 0 || n == 0) return;
  const Tensor aa = dgemm_readable(a), bb = dgemm_readable(b);
  dispatch_floating(a.dtype(), "linear", [&]<class T>(TypeTag<T>) {
    const T* bias_data = static_cast<const T*>(bias.raw_data());
    std::vector<T> dense_bias;
    if (bias.strides()[0] != 1 && n > 1) {
      dense_bias.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) dense_bias[static_cast<size_t>(j)] = bias_data[j * bias.strides()[0]];
      bias_data = dense_bias.data();
    }
    gemm_raw(static_cast<T*>(out.raw_data()), static_cast<const T*>(aa.raw_data()),
             static_cast<const T*>(bb.raw_data()), 1, m, k, n, 0, aa.strides()[0], aa.strides()[1], 0, bb.strides()[0],
             bb.strides()[1], bias_data);
  });
}

// A 16-bit product written as float32 rounded through its dtype (gemm_widened_stub): in one
// pass on short_inner_gemm (a weight gradient at a small batch) and on the widening kernel,
// else (oneDNN's bfloat16 kernels, the narrow one) the product and then its widening. Each way
// notes whether every value is finite as it stores them.
bool gemm_widened_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  HG_CHECK(out.is_contiguous() && out.dtype() == kFloat32 && a.dim() == 2 && b.dim() == 2 &&
               is_reduced_float(a.dtype()) && b.dtype() == a.dtype(),
           "mm", "a widened product needs 2-d 16-bit operands of one dtype and a contiguous float32 output");
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (m == 0 || n == 0) return true;
  NonFiniteSeen seen{false};
  dispatch_floating(a.dtype(), "mm", [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      const T* pa = static_cast<const T*>(a.raw_data());
      const T* pb = static_cast<const T*>(b.raw_data());
      float* po = static_cast<float*>(out.raw_data());
      if (use_short_inner_gemm(m, k, n)) {
        short_inner_gemm<T, float>(po, pa, a.strides()[0], a.strides()[1], pb, b.strides()[0], b.strides()[1], m, k, n,
                                   &seen);
        return;
      }
      // The products gemm_raw would widen (every float16 one, bfloat16 without native units):
      // the widening kernel stores its rounded sums widened.
      const bool widens = product_widens<T>();
      const bool narrow = use_narrow_gemm(m, k, n, b.strides()[0], b.strides()[1], widens) ||
                          use_narrow_gemm_transposed(m, k, n, a.strides()[1], widens);
      if (!narrow && widens) {
        widening_gemm<T, float>(po, pa, a.strides()[0], a.strides()[1], pb, b.strides()[0], b.strides()[1], m, k, n,
                                nullptr, &seen);
        return;
      }
      Workspace<T> product(m * n);
      gemm_raw(product.data(), pa, pb, 1, m, k, n, 0, a.strides()[0], a.strides()[1], 0, b.strides()[0], b.strides()[1],
               static_cast<const T*>(nullptr));
      parallel_for(m * n, kParallelGrain,
                   [&](int64_t i0, int64_t i1) { load_run(product.data() + i0, po + i0, i1 - i0, &seen); });
    }
  });
  return !seen.load();
}

}  // namespace

HG_REGISTER_KERNEL(gemm_stub, kCPU, gemm_cpu);
HG_REGISTER_KERNEL(gemm_bias_stub, kCPU, gemm_bias_cpu);
HG_REGISTER_KERNEL(gemm_widened_stub, kCPU, gemm_widened_cpu);

}  // namespace hg::cpu
