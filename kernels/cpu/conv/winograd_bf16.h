// Winograd F(2x2, 3x3) for bfloat16 3x3 convolutions of stride 1 and padding 1 (ResNet's), on the
// CPU's bfloat16 dot-product instruction (AVX512_BF16): each 2x2 output tile costs 16 products
// per channel pair instead of 36. oneDNN 2.6 has no bfloat16 Winograd, and its direct bfloat16
// kernels already run at the instruction's peak rate (about 230 GFLOP/s on one Zen 4 core), so
// fewer products is what makes these layers faster. The same kernel serves the input-gradient
// pass: a stride-1, padding-1 convolution of the output gradient by the kernel rotated 180
// degrees, in and out channels swapped (winograd_bf16_weights' `input_gradient`).
//
// Per block of tiles: the 4x4 input patches transformed (B^T d B, sums and differences, rounded
// to bfloat16 as the direct kernel's inputs are), 16 GEMMs over the input channels (one per
// transformed position, float32 sums), and the output transform (A^T m A) in float32, rounded
// once into the result. The filter's transform (G g G^T: halves of sums of three taps) is
// rounded to bfloat16 too. Results carry about twice the direct kernel's rounding error
// (tests/cpu/test_winograd_bf16.cpp bounds it against float64); HG_CPU_CONV=direct keeps oneDNN's
// direct kernels. conv/algorithm.h decides where it runs; conv/onednn.cpp calls it.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu {

// Whether this build and CPU can run it (AVX-512 with the bfloat16 dot product).
bool winograd_bf16_available();

// Whether it takes these sizes: in and out channels multiples of 16, an even image (whole 2x2
// tiles), and for NCHW activations h * w a multiple of 16 (their 16x16 transpositions).
bool winograd_bf16_takes(int64_t in, int64_t out, int64_t h, int64_t w, bool nhwc);

// The transformed filter's size in bfloat16 values: 16 per (in, out) channel pair.
inline int64_t winograd_bf16_weights_count(int64_t in, int64_t out) { return 16 * in * out; }

// u (winograd_bf16_weights_count(c, o) values, or (o, c) with input_gradient) from the bfloat16
// weights w [o, c, 3, 3] (OIHW; OHWI [o, 3, 3, c] with ohwi): for the forward (c -> o channels),
// or with input_gradient for the input gradient (o -> c channels, each kernel rotated by 180
// degrees). Spread over the thread pool.
void winograd_bf16_weights(const BFloat16* w, bool ohwi, int64_t o, int64_t c, bool input_gradient, BFloat16* u);

// y [n, out, h, w] = x [n, in, h, w] convolved with the transformed filter u (3x3, stride 1,
// padding 1), plus bias (float32, `out` values; may be null), then ReLU'd with relu; NCHW, or
// NHWC ([n, h, w, channels]) with nhwc, x and y alike. On the calling thread (a pool task).
// Needs winograd_bf16_available() and winograd_bf16_takes(in, out, h, w, nhwc).
void winograd_bf16_conv(const BFloat16* x, BFloat16* y, int64_t n, int64_t in, int64_t out, int64_t h, int64_t w,
                        bool nhwc, const BFloat16* u, const float* bias, bool relu);

// How winograd_bf16_filter_gradient writes its result: bfloat16, the float32 sums rounded once;
// Widened, float32 holding those rounded values (a widened gradient: framework/op.h's
// widened_gradient_wanted); Sums, the float32 sums themselves (a chunk's partial sums to add).
enum class WinogradFilterGradient { Rounded, Widened, Sums };

// The weight gradient of the same convolution (3x3, stride 1, padding 1) from x [n, in, h, w] and
// the output gradient gy [n, out, h, w] (NCHW, or NHWC with nhwc), by the transposed algorithm:
// both transformed per tile (gy's 2x2 tiles by A g A^T), the transformed filter's gradient summed
// over the tiles in float32 (16 GEMMs over tile pairs), and G^T (.) G back to 3x3 taps. Written,
// not added to, into dw as `form` says (bfloat16 for Rounded, float32 otherwise), OIHW or (ohwi)
// OHWI; db, when not null, gets gy's float32 sums per output channel. On the calling thread (a
// pool task).
void winograd_bf16_filter_gradient(const BFloat16* x, const BFloat16* gy, int64_t n, int64_t in, int64_t out, int64_t h,
                                   int64_t w, bool nhwc, bool ohwi, void* dw, WinogradFilterGradient form, float* db);

}  // namespace hg::cpu
