// conv2d through oneDNN's convolution primitives: bfloat16 on the CPU's bfloat16 dot-product
// instructions (AVX-512 BF16, AMX), instead of widening to float32 for an im2col + sgemm, and
// float32 on CPUs with AVX-512, where they beat the im2col path (conv/onednn.cpp says by how much),
// float16 there too, widened a chunk at a time onto the float32 primitives.
// kernels/cpu/conv/conv.cpp tries these first and keeps its own path when they decline.
#pragma once

#include <string>

#include "framework/ops/conv_kernels.h"

namespace hg::cpu {

// Each returns false, having written nothing, when oneDNN is off or not built; when the tensors
// are bfloat16 and this CPU has no native bfloat16, float32 or float16 and it has no AVX-512
// (unless HG_CPU_ONEDNN_CONV=float32; =im2col keeps both off them everywhere), or of another
// dtype;
// when oneDNN has only a reference kernel for the shape; the two forwards also for products at
// most 36 deep (input channels per group x kernel area: faster on conv.cpp's own path). Tensors
// are contiguous NCHW / OIHW, as the conv2d op hands them to its kernels.
// Whether these primitives may take a convolution of `input`'s dtype at all (the first of the
// conditions above); the others are known only when planning the call.
bool onednn_conv2d_applies(const Tensor& input);
// Which path each dtype's convolutions take on this CPU, in words (amp_bench prints it).
std::string cpu_conv_paths();
bool onednn_conv2d_forward(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const Conv2dParams& p);
// conv2d_relu_max_pool2d's forward (conv_kernels.h's conv2d_relu_max_pool_forward_stub): each
// chunk's result ReLU'd and 2x2-pooled while in cache, the convolution's output never written.
bool onednn_conv2d_relu_max_pool_forward(const Tensor& pooled, const Tensor& which, const Tensor& input,
                                         const Tensor& weight, const Tensor& bias, const Conv2dParams& p, int64_t oh,
                                         int64_t ow);
bool onednn_conv2d_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                                 const Conv2dParams& p);
bool onednn_conv2d_backward_filter(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& input, const Conv2dParams& p);
// Both passes (conv_kernels.h's conv2d_backward_stub), grad_out put in the primitives' layout once per chunk
// for the two of them.
bool onednn_conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                            const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Conv2dParams& p);
// conv2d_relu's and conv2d_relu_max_pool2d's backward (conv_kernels.h's conv2d_relu_backward_stub):
// chunks of samples whose convolution output gradient, made from the op's, stays in cache for both
// passes. grad_input or grad_weight may be undefined (not both).
bool onednn_conv2d_relu_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                 const Conv2dReluGrad& from, const Tensor& input, const Tensor& weight,
                                 const Conv2dParams& p, int64_t oh, int64_t ow);

}  // namespace hg::cpu
