// How BLAS reads a strided 2-d view: the transpose flag and leading dimension of a [rows, cols]
// matrix, written once for the CPU GEMM (OpenBLAS, oneDNN) and the CUDA cuBLASLt wrapper.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hg {

// A row-major BLAS operand: `transposed` means memory holds the matrix's transpose with dense
// rows (the view has unit row stride). `usable` is false when neither rows nor columns are dense
// (then the operand must be copied first).
struct BlasLayout {
  bool transposed = false;
  int64_t ld = 0;
  bool usable = false;
};

// The layout of a [rows, cols] view with element strides (row_stride, col_stride). A dimension of
// size 1 may have any stride, so the leading dimension is clamped to what BLAS accepts.
inline BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows <= 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {false, std::max<int64_t>(row_stride, std::max<int64_t>(cols, 1)), true};
  if (row_stride == 1 && (cols <= 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {true, std::max<int64_t>(col_stride, std::max<int64_t>(rows, 1)), true};
  return {};
}

// The inverse: the element strides (row, column) of the [rows, cols] matrix BLAS reads with this
// transpose flag and leading dimension.
struct BlasStrides {
  int64_t row_stride = 0, col_stride = 0;
};
inline BlasStrides blas_strides(bool transposed, int64_t ld) {
  return transposed ? BlasStrides{1, ld} : BlasStrides{ld, 1};
}

}  // namespace hg
