// CPU reductions over the last dim of a contiguous [outer, inner] tensor, and column sums over
// the first dim of a contiguous [rows, cols] tensor (bias gradients) without transposing it.
#include <algorithm>
#include <limits>

#include "framework/ops/reduce_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"

namespace hg::cpu {
namespace {

// Sums accumulate in double for float64/integers and in float otherwise; pairs of partial sums
// (8 lanes) keep float32 rounding error low and let the loop vectorise.
template <class T, class Acc>
Acc sum_row(const T* row, int64_t n) {
  constexpr int kLanes = 8;
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<Acc>(row[i + l]);
  Acc total = 0;
  for (; i < n; ++i) total += static_cast<Acc>(row[i]);
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  return total;
}

template <class T>
using sum_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>,
                                     std::conditional_t<std::is_floating_point_v<T>, double, int64_t>, float>;

template <class T>
void reduce_typed(ReduceOp op, const Tensor& out, const Tensor& in) {
  const int64_t outer = in.shape()[0], inner = in.shape()[1];
  const T* data = static_cast<const T*>(in.raw_data());
  using Acc = sum_acc_t<T>;
  parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = data + r * inner;
      if (op == ReduceOp::Sum) {
        const Acc s = sum_row<T, Acc>(row, inner);
        dispatch_dtype(out.dtype(), [&]<class O>(TypeTag<O>) {
          static_cast<O*>(out.raw_data())[r] = static_cast<O>(static_cast<acc_t<O>>(s));
        });
        continue;
      }
      // max/min/argmax/argmin: first extreme wins; NaN wins over everything (as PyTorch).
      int64_t best = 0;
      auto bv = static_cast<acc_t<T>>(row[0]);
      const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
      for (int64_t i = 1; i < inner && bv == bv; ++i) {
        const auto v = static_cast<acc_t<T>>(row[i]);
        if (v != v || (want_max ? v > bv : v < bv)) bv = v, best = i;
      }
      if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) {
        static_cast<int64_t*>(out.raw_data())[r] = best;
      } else {
        static_cast<T*>(out.raw_data())[r] = row[best];
      }
    }
  });
}

// out[j] = sum over rows i of in[i, j]. Adds in exactly the order sum_row uses on a transposed
// copy (8 lanes over rows i = l mod 8, then the tail rows, then the lanes), so the result is the
// same bit for bit and does not depend on the threads; the lanes are kept for a block of columns
// at a time and the inner loops run along a row, where they vectorise.
template <class T, class O>
void sum_columns_typed(const Tensor& out, const Tensor& in) {
  using Acc = sum_acc_t<T>;
  // 16-bit floats are widened a row block at a time: one conversion per element (per element,
  // float16's software conversion does not vectorise).
  constexpr bool kWidenFirst = (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)&&std::is_same_v<Acc, float>;
  constexpr int kLanes = 8;
  constexpr int64_t kBlock = 256;
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  const int64_t lane_rows = rows - rows % kLanes;
  const T* data = static_cast<const T*>(in.raw_data());
  O* dst = static_cast<O*>(out.raw_data());
  parallel_for(cols, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(rows, 1)), [&](int64_t b, int64_t e) {
    Acc lanes[kLanes][kBlock];
    Acc total[kBlock];
    for (int64_t c0 = b; c0 < e; c0 += kBlock) {
      const int64_t w = std::min(kBlock, e - c0);
      for (int l = 0; l < kLanes; ++l)
        for (int64_t j = 0; j < w; ++j) lanes[l][j] = Acc(0);
      for (int64_t i = 0; i < lane_rows; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const T* row = data + (i + l) * cols + c0;
          Acc* lane = lanes[l];
          if constexpr (kWidenFirst) {  // F16C / AVX-512 widening, then a plain float loop
            alignas(64) float wide[kBlock];
            load_run(row, wide, w);
            for (int64_t j = 0; j < w; ++j) lane[j] += wide[j];
          } else {
            for (int64_t j = 0; j < w; ++j) lane[j] += static_cast<Acc>(row[j]);
          }
        }
      }
      for (int64_t j = 0; j < w; ++j) total[j] = Acc(0);
      for (int64_t i = lane_rows; i < rows; ++i) {
        const T* row = data + i * cols + c0;
        for (int64_t j = 0; j < w; ++j) total[j] += static_cast<Acc>(row[j]);
      }
      for (int l = 0; l < kLanes; ++l)
        for (int64_t j = 0; j < w; ++j) total[j] += lanes[l][j];
      for (int64_t j = 0; j < w; ++j) dst[c0 + j] = static_cast<O>(static_cast<acc_t<O>>(total[j]));
    }
  });
}

void sum_columns_cpu(const Tensor& out, const Tensor& in) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_dtype(out.dtype(), [&]<class O>(TypeTag<O>) { sum_columns_typed<T, O>(out, in); });
  });
}

void reduce_cpu(ReduceOp op, const Tensor& out, const Tensor& in) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) { reduce_typed<T>(op, out, in); });
}

}  // namespace

HG_REGISTER_KERNEL(reduce_stub, kCPU, reduce_cpu);
HG_REGISTER_KERNEL(sum_columns_stub, kCPU, sum_columns_cpu);

}  // namespace hg::cpu
