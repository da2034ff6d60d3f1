// Adaptive pooling's bins, written once for the CPU and CUDA kernels: output i of `out` along a
// dim of `in` reads [floor(i in / out), ceil((i + 1) in / out)), PyTorch's formula. Conversely
// input h lies in the bins [floor(h out / in), ceil((h + 1) out / in)): with a = h out / in,
// floor(i in / out) <= h  <=>  i < (h + 1) out / in, and h < ceil((i + 1) in / out)  <=>  i > a - 1.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::adaptive {

HG_HOST_DEVICE inline int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
HG_HOST_DEVICE inline int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace hg::adaptive
