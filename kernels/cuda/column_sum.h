// Column sums on the device for any 2-D strided view: out[j] = sum over i < len of
// x[i * stride_i + j * stride_j], accumulated as sum() does (float32 for 16-bit and 32-bit
// floats, float64 for float64, int64 for integers) and rounded once into out's dtype. Used by the
// CUDA sum_columns kernel (bias gradients) and as cuBLASLt's bias-gradient fallback.
#pragma once

#include <cstdint>

#include "framework/dtype.h"

namespace hg::cuda {

// Queues the reduction on the device's current stream. Long columns are split across blocks
// (partial sums in the accumulation type, then a second pass), so a few columns still fill the GPU.
void column_sum(Dtype in_dtype, const void* x, int64_t len, int64_t cols, int64_t stride_i, int64_t stride_j,
                Dtype out_dtype, void* out, int device);

}  // namespace hg::cuda
