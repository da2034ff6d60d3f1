// HG_KERNEL_LOOP(i, n): the grid-stride loop every elementwise-style CUDA kernel runs, written
// once (as PyTorch's CUDA_KERNEL_LOOP). 64-bit indices, so tensors past 2^31 elements work.
#pragma once

#include <cstdint>

#define HG_KERNEL_LOOP(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
