// CPU matrix multiply: each product asks the router (kernels/cpu/gemm/route.h) for its path,
// given its shape, layout, dtype and the CPU's capabilities, and runs that path here: the
// in-register kernels for few rows or few columns (narrow.h) and short inner dimensions
// (short_inner.h), oneDNN (onednn.h), the 16-bit products widened to float32 (packed.h,
// widening.h), and OpenBLAS (blas.h).
#include <algorithm>
#include <array>
#include <vector>

#include "framework/ops/matmul_kernels.h"
#include "kernels/common/blas_layout.h"
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/gemm/narrow.h"
#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/gemm/packed.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/gemm/short_inner.h"
#include "kernels/cpu/gemm/widening.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

// At load: OpenBLAS computes on the calling thread only; blas_gemm (blas.h) spreads large
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
  if (m == 0 || n == 0) return false;
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

// The problem route() is asked about: one matrix of the batch.
template <class T>
GemmProblem problem_of(int64_t m, int64_t k, int64_t n, int64_t sa1, int64_t sa2, int64_t sb1, int64_t sb2,
                       GemmCaller caller = GemmCaller::Product) {
  return GemmProblem{m, k, n, sa1, sa2, sb1, sb2, dtype_of<T>, caller};
}

// out[i] = a[i] @ b[i] for the batch on `path`, plus a dense row vector bias when one is given
// (batch 1). The paths that add the bias inside the product (narrow, oneDNN's bfloat16 kernels,
// the widening ones) take it; the others leave it to add_bias_rows afterwards.
template <class T>
void run_path(GemmPath path, T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n,
              int64_t sa0, int64_t sa1, int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2, const T* bias) {
  constexpr bool k16 = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;
  const auto finish = [&] {
    if (bias != nullptr) add_bias_rows(po, m, n, bias);
  };
  switch (path) {
    case GemmPath::Narrow:
      if constexpr (!std::is_same_v<T, double>) {
        for (int64_t i = 0; i < batch; ++i)
          narrow_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n, bias);
        return;
      }
      break;
    case GemmPath::NarrowTransposed:
      if constexpr (!std::is_same_v<T, double>) {
        for (int64_t i = 0; i < batch; ++i)
          narrow_gemm_transposed(po + i * m * n, pa + i * sa0, sa1, pb + i * sb0, sb1, sb2, m, k, n, bias);
        return;
      }
      break;
    case GemmPath::ShortInner:
      if constexpr (k16) {
        for (int64_t i = 0; i < batch; ++i)
          short_inner_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n);
        return finish();
      }
      break;
    case GemmPath::OneDnn:
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (onednn_gemm(po, pa, pb, batch, m, k, n, {sa0, sa1, sa2}, {sb0, sb1, sb2}, bias)) return;
      } else if constexpr (std::is_same_v<T, float>) {
        if (onednn_gemm(po, pa, pb, batch, m, k, n, {sa0, sa1, sa2}, {sb0, sb1, sb2}, static_cast<const T*>(nullptr)))
          return finish();
      }
      // oneDNN declined while planning (a reference kernel only): the router's fallback.
      return run_path(onednn_fallback(problem_of<T>(m, k, n, sa1, sa2, sb1, sb2), cpu_caps()), po, pa, pb, batch, m, k,
                      n, sa0, sa1, sa2, sb0, sb1, sb2, bias);
    case GemmPath::Blas:
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const BlasLayout va = blas_layout(m, k, sa1, sa2), vb = blas_layout(k, n, sb1, sb2);
        HG_CHECK(va.usable && vb.usable, "gemm", "operands BLAS cannot read should have been made dense");
        for (int64_t i = 0; i < batch; ++i) {
          blas_gemm<T>(va.transposed, vb.transposed, m, n, k, T(1), pa + i * sa0, va.ld, pb + i * sb0, vb.ld, T(0),
                       po + i * m * n, n);
        }
        return finish();
      }
      break;
    case GemmPath::DenseBlas:
      if constexpr (std::is_same_v<T, float>) {
        // float32 in a layout BLAS cannot read: made dense, then a library product.
        Workspace<float> fa(m * k), fb(k * n);
        for (int64_t i = 0; i < batch; ++i) {
          const WidenedMatrix da = widen_matrix(pa + i * sa0, m, k, sa1, sa2, fa.data());
          const WidenedMatrix db = widen_matrix(pb + i * sb0, k, n, sb1, sb2, fb.data());
          gemm(da.transposed, db.transposed, m, n, k, fa.data(), da.ld, fb.data(), db.ld, po + i * m * n, n, false);
        }
        return finish();
      }
      break;
    case GemmPath::Packed:
      if constexpr (k16) {
        for (int64_t i = 0; i < batch; ++i)
          packed_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n, bias);
        return;
      }
      break;
    case GemmPath::Widening:
      if constexpr (k16) {
        for (int64_t i = 0; i < batch; ++i)
          widening_gemm(po + i * m * n, pa + i * sa0, sa1, sa2, pb + i * sb0, sb1, sb2, m, k, n, bias);
        return;
      }
      break;
  }
  fail("mm", "the CPU product router sent a {} product to the {} path, which does not take it", dtype_of<T>,
       path_name(path));
}

// out[i] = a[i] @ b[i] for the batch, plus a dense row vector bias when one is given (batch 1).
template <class T>
void gemm_raw(T* po, const T* pa, const T* pb, int64_t batch, int64_t m, int64_t k, int64_t n, int64_t sa0, int64_t sa1,
              int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2, const T* bias) {
  if (k == 0) {
    for (int64_t i = 0; i < batch * m * n; ++i) po[i] = T(0);
    if (bias != nullptr) add_bias_rows(po, m, n, bias);
    return;
  }
  run_path(route(problem_of<T>(m, k, n, sa1, sa2, sb1, sb2)), po, pa, pb, batch, m, k, n, sa0, sa1, sa2, sb0, sb1, sb2,
           bias);
}

template <class T>
void gemm_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm_raw(static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
           a.shape()[0], a.shape()[1], a.shape()[2], b.shape()[2], a.strides()[0], a.strides()[1], a.strides()[2],
           b.strides()[0], b.strides()[1], b.strides()[2], static_cast<const T*>(nullptr));
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

// A 16-bit product written as float32 rounded through its dtype (gemm_widened_stub), on the path
// the router gives a widened product: in one pass on short_inner_gemm (a weight gradient at a
// small batch) and the widening kernels, else (oneDNN's bfloat16 kernels, the narrow one) the
// product and then its widening. Each way notes whether every value is finite as it stores them.
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
      const int64_t sa1 = a.strides()[0], sa2 = a.strides()[1], sb1 = b.strides()[0], sb2 = b.strides()[1];
      if (k == 0) {
        std::fill_n(po, m * n, 0.0f);
        return;
      }
      const GemmPath path = route(problem_of<T>(m, k, n, sa1, sa2, sb1, sb2, GemmCaller::Widened));
      switch (path) {
        case GemmPath::ShortInner: return short_inner_gemm<T, float>(po, pa, sa1, sa2, pb, sb1, sb2, m, k, n, &seen);
        case GemmPath::Packed: return packed_gemm<T, float>(po, pa, sa1, sa2, pb, sb1, sb2, m, k, n, nullptr, &seen);
        case GemmPath::Widening:
          return widening_gemm<T, float>(po, pa, sa1, sa2, pb, sb1, sb2, m, k, n, nullptr, &seen);
        default: break;
      }
      Workspace<T> product(m * n);
      run_path(path, product.data(), pa, pb, 1, m, k, n, 0, sa1, sa2, 0, sb1, sb2, static_cast<const T*>(nullptr));
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
