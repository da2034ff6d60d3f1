// bfloat16 matrix multiply through oneDNN's matmul primitive, which runs on the CPU's native
// bfloat16 instructions (AVX-512 BF16 dot products, AMX tiles). OpenBLAS has no bfloat16 GEMM,
// so without this path bfloat16 operands are widened to float32 for sgemm (kernels/cpu/gemm.cpp).
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// One [rows, cols] operand and its element strides (one of them must be 1).
struct MatrixView {
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0;
};

// True when halfgrad was built with oneDNN, this CPU multiplies bfloat16 natively, and the
// environment does not turn the path off (HG_CPU_ONEDNN=0, for comparisons).
bool onednn_bf16_enabled();

// out = a @ b with bfloat16 operands, float32 accumulation and one rounding of the result;
// out is a dense row-major [a.rows, b.cols] matrix. Returns false, having written nothing,
// when oneDNN would not run this shape on a fast kernel; the caller then takes another path.
bool onednn_bf16_gemm(BFloat16* out, const BFloat16* a, MatrixView av, const BFloat16* b, MatrixView bv);

}  // namespace hg::cpu
