// The CUDA half of hg::cuda::Graph that kernels see: the seed table a capture's random kernels
// read. Internal to kernels/cuda.
#pragma once

#include <cstdint>

namespace hg::cuda {

// While a capture records on `device`, the device address of its seed table: a random kernel
// launched with seed s (a slot number, framework/capture_state.h) uses table[s], which every
// replay rewrites. nullptr when nothing is captured: the seed is the value itself.
const uint64_t* capture_seed_table(int device);

// Bytes the caching allocator holds for live graphs' private pools on `device` (tests).
int64_t graph_pool_bytes(int device);

}  // namespace hg::cuda
