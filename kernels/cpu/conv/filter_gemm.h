// A float32 convolution's weight gradient as one GEMM over a batch of samples: each sample's input
// packed as im2col columns side by side ([c x kh x kw, samples x oh x ow]) and the output gradient
// as rows of the same length ([o, samples x oh x ow]), so the product's reduction runs over every
// output position of the batch at once. oneDNN 2.6's direct weight-gradient kernels reach about
// half this CPU's float32 GEMM rate on small images (a 512-channel 4x4 layer of ResNet-18); a
// sample-at-a-time GEMM (conv.cpp's own path) reduces over only oh x ow positions.
// conv/algorithm.h decides where it runs; conv/onednn.cpp calls it per chunk of samples.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv/im2col.h"

namespace hg::cpu {

// dw [o, c*kh*kw] and, when db is not null, db [o]: the weight and bias gradients of the
// g.n samples x [n, c, h, w] with output gradient gy [n, o, oh*ow], all float32, one group;
// written, not added to. The GEMMs run on the calling thread's share (single-threaded inside a
// pool task).
void filter_gradient_gemm(const ConvGeometry& g, const float* x, const float* gy, float* dw, float* db);

// The same for bfloat16 x and gy, all g.n samples in one GEMM on the CPU's bfloat16 units (oneDNN's
// matmul): dw, bfloat16, is the float32 sums rounded once (bfloat16 results cannot be added across
// GEMMs, so the batch is never split); db, when not null, gets float32 sums. Where oneDNN has no
// bfloat16 kernel for the product, the same values on the float32 GEMM.
void filter_gradient_gemm(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, BFloat16* dw, float* db);
// The same with the float32 sums kept: a widened gradient, or a chunk's partial sums to add.
void filter_gradient_gemm(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, float* dw, float* db);

// The same for channels-last tensors: x [n, h, w, c], gy [n, oh, ow, o], and dw in OHWI
// ([o, kh, kw, c], a channels-last weight's gradient). Each output position's patch is one row
// of kh x kw x c values (c contiguous runs of x), and gy's rows are the product's other operand as
// they lie, read transposed.
void filter_gradient_gemm_nhwc(const ConvGeometry& g, const float* x, const float* gy, float* dw, float* db);
void filter_gradient_gemm_nhwc(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, BFloat16* dw, float* db);
void filter_gradient_gemm_nhwc(const ConvGeometry& g, const BFloat16* x, const BFloat16* gy, float* dw, float* db);

// The geometry of n samples of a convolution (groups == 1).
ConvGeometry conv_geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw, int64_t oh,
                           int64_t ow, const Conv2dParams& p);

}  // namespace hg::cpu
