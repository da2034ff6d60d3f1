// conv2d_relu's and conv2d_relu_max_pool2d's backward on the CPU (conv_kernels.h's
// Conv2dReluGrad): a few samples' convolution output gradient, made on the calling thread right
// before their backward passes read it (kernels/cpu/conv/conv.cpp, conv/onednn.cpp), so the whole
// gradient is never written.
#pragma once

#include <cstdint>

#include "framework/ops/conv_kernels.h"
#include "kernels/cpu/conv/pool_2x2.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {

// Samples [first, first + count)'s convolution output gradient [count, o, oh, ow] into `out`: relu's
// gradient of the op's, or through the 2x2 pool's windows and the ReLU's mask after the pool. T is
// the tensors' dtype.
template <class T>
void make_conv_output_grad(const Conv2dReluGrad& from, int64_t first, int64_t count, int64_t o, int64_t oh, int64_t ow,
                           T* out) {
  const T* grad = static_cast<const T*>(from.grad.raw_data());
  const T* y = static_cast<const T*>(from.out.raw_data());
  if (from.which.defined()) {
    const int64_t at = first * o * (oh / 2) * (ow / 2);
    relu_max_pool_2x2_backward_planes(grad + at, static_cast<const uint8_t*>(from.which.raw_data()) + at, y + at, out,
                                      count * o, oh, ow);
  } else {
    const int64_t at = first * o * oh * ow;
    relu_gradient_rows(grad + at, y + at, out, count * o * oh * ow);
  }
}

}  // namespace hg::cpu
