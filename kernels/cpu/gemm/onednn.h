// Matrix multiply through oneDNN: float32 on its sgemm (x @ W^T on its matmul primitive's brgemm
// kernels, which pack a weight read transposed faster), and bfloat16 on the matmul primitive and
// the CPU's native bfloat16 instructions (AVX-512 BF16 dot products, AMX tiles). OpenBLAS
// has no bfloat16 GEMM, and oneDNN's float32 kernels beat sgemm on these shapes without
// OpenBLAS's spinning worker threads (docs/history/PERF-CPU-HISTORY.md). The router (route.h) sends
// products here; where this path declines, they take route.h's onednn_fallback.
#pragma once

#include <cstdint>

#include "framework/dtype.h"
#include "kernels/common/blas_layout.h"

namespace hg::cpu {

// One [rows, cols] operand and its element strides (one of them must be 1).
struct MatrixView {
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;

  // The [rows, cols] matrix BLAS reads with this transpose flag and leading dimension.
  static MatrixView blas(int64_t rows, int64_t cols, bool transposed, int64_t ld) {
    const BlasStrides s = blas_strides(transposed, ld);
    return MatrixView{rows, cols, s.row_stride, s.col_stride};
  }
};

// out = a @ b for float32 or bfloat16 operands (float32 accumulation, one rounding of the
// result), or out += a @ b when `accumulate` (float32 only; bfloat16 declines it); out is a row-major [a.rows, b.cols]
// matrix with row stride out_ld. The rows or columns are split over halfgrad's thread pool (inside a pool task, as in
// conv's loop over samples, it runs on the calling thread). Returns false, having written nothing, when halfgrad was
// built without oneDNN or oneDNN has no fast kernel for it (whether it is worth it is the router's question).
//
// bias (bfloat16 only, b.cols dense values) adds a row vector to the float32 sums before their one
// rounding, inside oneDNN's kernel.
bool onednn_matmul(Dtype dtype, void* out, int64_t out_ld, bool accumulate, const void* a, MatrixView av, const void* b,
                   MatrixView bv, const void* bias = nullptr);

// out = a @ b of bfloat16 operands with the float32 sums kept (a convolution's weight gradient
// as a chunk's partial sums, or widened: conv/filter_gemm.h), in one part on the calling thread
// (the callers run inside pool tasks). Returns false, having written nothing, as above.
bool onednn_matmul_bf16_widened(float* out, int64_t out_ld, const void* a, MatrixView av, const void* b, MatrixView bv);

}  // namespace hg::cpu
