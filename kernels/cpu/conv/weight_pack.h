// bfloat16 weights (OIHW) into the blocked layouts oneDNN's bfloat16 convolution kernels read,
// in place of oneDNN 2.6's generic reorder. Those layouts pair two values of one dimension in
// each 32-bit word (the dot-product instructions take bfloat16 pairs), and the generic reorder
// moves them one at a time: 2.9 ms for a 512x512x3x3 weight on the Zen 4, 13 ms of a ResNet-18
// bf16 step. Here the source is read in order and each tap's words are written as one run.
// Built with oneDNN only.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

#include "framework/half.h"

namespace hg::cpu::onednn_conv {

// Which of the packed layouts `desc` is (4-D bf16 weights [O, I, kh, kw], kernels of at most 64
// taps, no padding, no offset):
//   Forward: the output-channel blocks of brgconv, AcdB{16,32,48,64}a2b and their reorderings
//     (inner blocks: X output channels, then pairs of input channels);
//   None: anything else, left to oneDNN's reorder. (The input-gradient kernels' ABcd8a16b2a, whose
//     pairs are of output channels, reorders at about 6 values a nanosecond there already.)
enum class PackedLayout { None, Forward };
PackedLayout packed_layout(const dnnl::memory::desc& desc);

// Writes the OIHW bfloat16 weights `src` into `dst` (desc.get_size() bytes) laid out as `desc`;
// false, having written nothing, where packed_layout(desc) is None.
bool pack_bf16_weights(const uint16_t* src, const dnnl::memory::desc& desc, void* dst);

// The other way, for the weight-gradient pass: a gradient in oneDNN's ABcd16b16a blocks
// ([O/16][I/16][k][16 i][16 o], k = kh * kw; o and in multiples of 16) into OIHW `out`: float32
// partial sums, or a bfloat16 gradient oneDNN has rounded.
void unblock_filter_gradient(const float* blocks, float* out, int64_t o, int64_t in, int64_t k);
void unblock_filter_gradient(const BFloat16* blocks, BFloat16* out, int64_t o, int64_t in, int64_t k);

}  // namespace hg::cpu::onednn_conv
