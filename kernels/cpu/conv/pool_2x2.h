// The 2x2, stride-2 max pool of conv2d_relu_max_pool2d and its backward as plane-level functions,
// so the CPU convolution can pool each sample's output block while it is still in cache, and make
// each sample's output gradient right before its backward passes (kernels/cpu/conv/conv.cpp,
// conv/onednn.cpp); pool_2x2.cpp also runs them over whole tensors, as the op's kernels.
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

// The gradient of `planes` [h, w] planes of the pool's input (the ReLU'd convolution output) into
// `grad`, from the pooled gradient, the codes above and the pooled values, [h/2, w/2] planes
// each: a window's chosen element gets 0 + its gradient where the pooled value is positive (the
// ReLU's mask), every other element 0, the rows and columns no window covers too. On the calling
// thread; T as above.
template <class T>
void relu_max_pool_2x2_backward_planes(const T* grad_pooled, const uint8_t* codes, const T* pooled, T* grad,
                                       int64_t planes, int64_t h, int64_t w);

}  // namespace hg::cpu
