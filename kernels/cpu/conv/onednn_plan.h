// The plans of conv2d's oneDNN path (conv/onednn.cpp): a convolution problem cut into chunks of
// samples, and for each chunk shape and pass a cached primitive with the reorders between
// halfgrad's NCHW / OIHW tensors and the primitive's layouts. Built with oneDNN only.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

#include "framework/ops/conv_kernels.h"
#include "kernels/cpu/conv/algorithm.h"

namespace hg::cpu::onednn_conv {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kBf16 = memory::data_type::bf16;
constexpr auto kF32 = memory::data_type::f32;

// BackwardFilter gives the weight gradient as float32 partial sums (conv/onednn.cpp adds a call's
// chunks and rounds once); BackwardFilterRounded, for a call of one chunk of bfloat16, gives it in
// bfloat16, oneDNN rounding its own float32 sums once: half the bytes to write and unblock, and
// on the Zen 4 a faster kernel for some shapes (3.3 vs 4.2 ms for ResNet-18's 64-channel layer).
enum class Pass { Forward, BackwardData, BackwardFilter, BackwardFilterRounded };
inline bool filter_pass(Pass p) { return p == Pass::BackwardFilter || p == Pass::BackwardFilterRounded; }

// One chunk of a call: n samples of the full problem. The plans' cache key.
struct Problem {
  memory::data_type dt;  // of the activations and weights: bf16 or f32
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t stride[2], padding[2], dilation[2];
  bool bias;
  bool nhwc;  // halfgrad's activations are channels-last (else NCHW)
  bool ohwi;  // halfgrad's weights (and their gradient) are channels-last (else OIHW)

  std::array<int64_t, 21> key(Pass pass) const {
    return {static_cast<int64_t>(pass),
            static_cast<int64_t>(dt),
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            oh,
            ow,
            groups,
            stride[0],
            stride[1],
            padding[0],
            padding[1],
            dilation[0],
            dilation[1],
            bias ? 1 : 0,
            nhwc ? 1 : 0,
            ohwi ? 1 : 0};
  }
  memory::dims src() const { return {n, c, h, w}; }
  memory::dims dst() const { return {n, o, oh, ow}; }
  memory::dims weights() const {
    return groups == 1 ? memory::dims{o, c, kh, kw} : memory::dims{groups, o / groups, c / groups, kh, kw};
  }
  Tag weights_tag() const {
    if (groups == 1) return ohwi ? Tag::ohwi : Tag::oihw;
    return ohwi ? Tag::gohwi : Tag::goihw;
  }
  // halfgrad's activations' layout.
  Tag user_tag() const { return nhwc ? Tag::nhwc : Tag::nchw; }
  // The activations' layout in the primitives: float32 with whole blocks of 16 input and output
  // channels in oneDNN's nChw16c, the native layout of its AVX-512 direct kernels (faster than
  // NHWC in all three passes of ResNet-18's float32 step: docs/BENCHMARKS.md); bfloat16, and
  // channel counts off the blocks, channels-last (NHWC), where oneDNN's bfloat16 kernels are
  // fastest (nChw16c measured no better there).
  Tag activations_tag() const {
    return dt == kF32 && (c / groups) % 16 == 0 && (o / groups) % 16 == 0 ? Tag::nChw16c : Tag::nhwc;
  }
  // As conv/algorithm.h's choice sees it.
  ConvShape shape() const;
  memory::dims strides() const { return {stride[0], stride[1]}; }
  memory::dims dilates() const { return {dilation[0] - 1, dilation[1] - 1}; }  // oneDNN counts the gaps
  memory::dims pad_left() const { return {padding[0], padding[1]}; }
  // The far-side padding that makes oneDNN's output size the op's (which rounds down).
  memory::dims pad_right() const {
    return {(oh - 1) * stride[0] + (kh - 1) * dilation[0] + 1 - h - padding[0],
            (ow - 1) * stride[1] + (kw - 1) * dilation[1] + 1 - w - padding[1]};
  }
};

// The problem of a convolution of `input` by `weight` into an oh x ow output (bf16 for bfloat16
// tensors, f32 for float32 and float16 ones, which run on the float32 primitives); nhwc when
// `input` is a channels-last 4-d tensor, ohwi when `weight` is.
Problem problem_of(const Tensor& input, const Tensor& weight, int64_t oh, int64_t ow, bool bias, const Conv2dParams& p);

// A primitive for one pass of one problem, with the reorders between halfgrad's NCHW or NHWC / OIHW
// tensors and the layouts the primitive runs in: activations in Problem::activations_tag's,
// weights in whatever blocked layout it picked. Where halfgrad's activations are already in the
// primitive's layout (NHWC bfloat16), the passes read and write them in place.
struct Plan {
  bool usable = false;
  dnnl::primitive primitive;
  memory::desc scratch;
  // Activations: halfgrad's layout and the primitive's, for the input side and output side.
  memory::desc in_user, in_prim, out_user, out_prim;
  dnnl::reorder in_reorder, out_reorder;
  // Weights: halfgrad's OIHW (bf16 for the forward and backward-data passes, f32 partials for the
  // filter pass, bf16 for the rounded one) and the primitive's layout.
  memory::desc weights_user, weights_prim;
  dnnl::reorder weights_reorder;
  // The filter pass's weight gradient comes in ABcd16b16a blocks ([O/16][I/16][kh][kw][16 i][16 o],
  // no padding), which conv/layouts.h unblocks instead of running weights_reorder.
  bool filter_blocks16 = false;
  // A BackwardFilterRounded plan: the weight gradient (weights_prim, weights_user) in bfloat16.
  bool rounded = false;
  // weights_user is OHWI (Problem::ohwi), not OIHW.
  bool weights_ohwi = false;
  memory::desc bias;
};

// The plan for a pass of a chunk shape, made the first time it is asked for (onednn_common.h's
// cache); not usable where oneDNN has no kernel for it, or only a reference one.
std::shared_ptr<const Plan> plan_for(Pass pass, const Problem& pr);

// The samples are cut into one chunk per pool thread, or into chunks of at most `most` samples
// (a fused pass that wants each chunk's result in cache); every chunk but maybe the last has
// `per` samples, so a call needs at most two plans.
struct Chunks {
  int64_t count = 1, per = 0;
  int64_t size(int64_t i, int64_t n) const { return std::min(per, n - i * per); }
};
Chunks chunks_for(int64_t n, int64_t most = 0);

// A plan per chunk size, or nothing when either size has no usable plan.
struct ChunkPlans {
  std::shared_ptr<const Plan> full, last;
  bool usable() const { return full && full->usable && last && last->usable; }
  const Plan& of(const Chunks& c, int64_t i) const { return i == c.count - 1 ? *last : *full; }
};
ChunkPlans plans_for(Pass pass, Problem pr, const Chunks& c);

}  // namespace hg::cpu::onednn_conv
