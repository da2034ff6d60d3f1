// The 2x2, stride-2 max pool of conv2d_relu_max_pool2d as a plane-level function, so the CPU
// convolution can pool each sample's output block while it is still in cache
// (kernels/cpu/conv.cpp) and the pool kernel can run it over a whole tensor (pool.cpp).
#pragma once

#include <cstdint>

namespace hg::cpu {

// On the calling thread: `planes` contiguous [h, w] planes of x into [h/2, w/2] planes of y and
// of codes, each window's chosen element as 0..3 (row-major in the window), by max_pool2d's rule
// (the first candidate seeds, a later one wins when larger or NaN; the value stored is the
// chosen element itself). h, w >= 2; an odd last row or column is left out (floor mode). T is
// float, double, Half or BFloat16.
template <class T>
void max_pool_2x2_codes_planes(const T* x, T* y, uint8_t* codes, int64_t planes, int64_t h, int64_t w);

}  // namespace hg::cpu
