// halfgrad's own moves between its tensors (NCHW or NHWC activations, OIHW or OHWI weights) and the layouts of
// oneDNN's convolution primitives, where oneDNN 2.6's generic reorders are slow; each returns
// false, having written nothing, for a layout it does not take, and the caller runs oneDNN's
// reorder instead. Built with oneDNN only.
//
// - bfloat16 weights into the forward's blocked layouts: they pair two values of one dimension
//   in each 32-bit word (the dot-product instructions take bfloat16 pairs), and the generic
//   reorder moves them one at a time: 2.9 ms for a 512x512x3x3 weight on the Zen 4, 13 ms of a
//   ResNet-18 bf16 step. Here the source is read in order and each tap's words are written as
//   one run.
// - weight gradients out of oneDNN's 16x16 blocks, and 16-bit activations between NCHW and NHWC,
//   by 16 x 16 transpositions in registers on AVX-512.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu::onednn_conv {

// Which of the packed layouts `desc` is (4-D bf16 weights [O, I, kh, kw], kernels of at most 64
// taps, no padding, no offset):
//   Forward: the output-channel blocks of brgconv, AcdB{16,32,48,64}a2b and their reorderings
//     (inner blocks: X output channels, then pairs of input channels);
//   None: anything else, left to oneDNN's reorder. (The input-gradient kernels' ABcd8a16b2a was
//     packed too, by register transposes: in a training step, where the weights come from memory,
//     it ran no faster than oneDNN's reorder, about 4 ms of a ResNet-18 bf16 step for either.)
enum class PackedLayout { None, Forward };
PackedLayout packed_layout(const dnnl::memory::desc& desc);

// Writes the bfloat16 weights `src`, OIHW or (`ohwi`: a channels-last weight) OHWI, into `dst`
// (desc.get_size() bytes) laid out as `desc`; false, having written nothing, where
// packed_layout(desc) is None.
bool pack_bf16_weights(const uint16_t* src, bool ohwi, const dnnl::memory::desc& desc, void* dst);

// The other way, for the weight-gradient pass: a gradient in oneDNN's ABcd16b16a blocks
// ([O/16][I/16][k][16 i][16 o], k = kh * kw; o and in multiples of 16) into OIHW `out`, or OHWI
// with `ohwi` (a channels-last weight's gradient): float32 partial sums, or a bfloat16 gradient
// oneDNN has rounded.
void unblock_filter_gradient(const float* blocks, float* out, int64_t o, int64_t in, int64_t k, bool ohwi = false);
void unblock_filter_gradient(const BFloat16* blocks, BFloat16* out, int64_t o, int64_t in, int64_t k,
                             bool ohwi = false);
// The bfloat16 gradient widened to float32 as it is unblocked (a widened gradient: the float32
// .grad of a weight autocast cast to bfloat16, widened_gradient_wanted in framework/op.h).
void unblock_filter_gradient(const BFloat16* blocks, float* out, int64_t o, int64_t in, int64_t k, bool ohwi = false);

// 16-bit activations [n, c, h, w] from `from`'s layout to `to`'s, where one is NCHW and the other
// NHWC (the bfloat16 primitives' layout), c and h * w multiples of 16, on AVX-512: each sample a
// 16 x 16 register transposition at a time (oneDNN 2.6's reorder moved about 2 values a
// nanosecond here). false, nothing written, otherwise.
bool transpose_activations(const dnnl::memory::desc& from, const dnnl::memory::desc& to, const void* src, void* dst);

}  // namespace hg::cpu::onednn_conv
