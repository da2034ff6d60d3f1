// conv_transpose2d: the adjoint of conv2d, so it runs on convolution's stubs rather than kernels
// of its own. Forward: conv2d's backward-data with the input in the role of conv2d's output
// gradient. Backward: the input's gradient is conv2d of the output gradient with the same weight,
// the weight's is conv2d's backward-filter with the input and output gradient swapped
// (conv2d_weight_grad), the bias's a sum: differentiable ops, so it differentiates again.
#include "framework/ops/conv_transpose.h"

#include "framework/op.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/conv_args.h"
#include "framework/ops/conv_kernels.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/pad.h"
#include "framework/ops/reduce.h"

namespace hg {

namespace {
const OpDef kConvTranspose2d{"conv_transpose2d"};
}  // namespace

Tensor conv_transpose2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                        std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> output_padding,
                        int64_t groups, std::vector<int64_t> dilation) {
  const char* op = kConvTranspose2d.name;
  OpCall call(kConvTranspose2d, {input_in, weight_in, bias_in});
  const Tensor& input = call.input(0);
  const Tensor& weight = call.input(1);
  const Tensor& bias = call.input(2);
  conv_args::check_tensors(op, input, weight, bias, "[N, C_in, H, W]", "[C_in, C_out/groups, kh, kw]");
  Conv2dParams p;
  int64_t out_pad[2];
  conv_args::pair(op, stride, "stride", p.stride);
  conv_args::pair(op, padding, "padding", p.padding);
  conv_args::pair(op, output_padding, "output_padding", out_pad);
  conv_args::pair(op, dilation, "dilation", p.dilation);
  p.groups = groups;
  HG_CHECK(groups > 0, op, "groups must be positive, got {}", groups);
  for (int i = 0; i < 2; ++i) {
    HG_CHECK(p.stride[i] > 0 && p.dilation[i] > 0 && p.padding[i] >= 0, op,
             "stride and dilation must be positive and padding non-negative, got stride {}, padding {}, dilation {}",
             fmt::join(stride, ", "), fmt::join(padding, ", "), fmt::join(dilation, ", "));
    HG_CHECK(out_pad[i] >= 0 && (out_pad[i] < p.stride[i] || out_pad[i] < p.dilation[i]), op,
             "output_padding must be non-negative and smaller than stride or dilation, got output_padding {} for "
             "stride {} and dilation {}",
             fmt::join(output_padding, ", "), fmt::join(stride, ", "), fmt::join(dilation, ", "));
  }
  const bool unbatched = input.dim() == 3;
  const Tensor x = unbatched ? internal::unsqueezed(input, 0) : input.detach();
  const int64_t n = x.size(0), c_in = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t kh = weight.size(2), kw = weight.size(3), c_out = weight.size(1) * groups;
  HG_CHECK(kh > 0 && kw > 0, op, "weight shape {} has an empty kernel", weight.shape());
  HG_CHECK(weight.size(0) == c_in, op, "input shape {} has {} channels, but weight shape {} expects {}", input.shape(),
           c_in, weight.shape(), weight.size(0));
  HG_CHECK(c_in % groups == 0, op, "{} input channels are not divisible by groups={}", c_in, groups);
  HG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == c_out), op,
           "bias must have shape [{}] for weight shape {} and groups={}, got {}", c_out, weight.shape(), groups,
           bias.shape());
  const int64_t oh = (h - 1) * p.stride[0] - 2 * p.padding[0] + p.dilation[0] * (kh - 1) + out_pad[0] + 1;
  const int64_t ow = (w - 1) * p.stride[1] - 2 * p.padding[1] + p.dilation[1] * (kw - 1) + out_pad[1] + 1;
  HG_CHECK(h > 0 && w > 0 && oh > 0 && ow > 0, op, "input shape {} gives an empty or negative output size {}x{}",
           input.shape(), oh, ow);
  // conv2d of the output has (hp, wp) rows and columns: (h, w), or more when output_padding is not
  // below the stride (only below the dilation). The stubs expect those sizes, so the input is then
  // extended with zeros, which add nothing to the output.
  const int64_t hp = (oh + 2 * p.padding[0] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
  const int64_t wp = (ow + 2 * p.padding[1] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
  const std::vector<int64_t> extend = {0, wp - w, 0, hp - h};
  const bool extended = hp != h || wp != w;
  Tensor xc = internal::contiguous(x);
  if (extended) {  // zeros with x in their top-left corner, in the internal tier (no op event)
    Tensor wide = zeros({n, c_in, hp, wp}, TensorOptions(x.dtype()).device(x.device()));
    if (xc.numel()) copy_stub(x.device().type, internal::alias(wide, xc.shape(), wide.strides(), 0), xc);
    xc = wide;
  }
  const Tensor wc = internal::contiguous(weight);
  Tensor out4 = empty({n, c_out, oh, ow}, TensorOptions(x.dtype()).device(x.device()));
  if (out4.numel()) conv2d_backward_data_stub(x.device().type, out4, xc, wc, p);
  if (bias.defined() && out4.numel()) {
    // The bias broadcast over [N, C_out, OH, OW], added in place: out4 is fresh (elementwise
    // kernels read each element before they write it).
    const Tensor b = internal::alias(bias, out4.shape(), {0, bias.strides()[0], 0, 0}, bias.offset());
    binary_stub(x.device().type, BinaryOp::Add, out4, out4, b, 1.0);
  }
  Tensor out = unbatched ? internal::alias_contiguous(out4, {c_out, oh, ow}) : out4;
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(input, op), sw = SavedTensor(weight, op), p, unbatched, extended, extend, in_h = h, in_w = w,
          has_bias = bias.defined(), need_x = input.requires_grad(), need_w = weight.requires_grad(),
          need_b = bias.defined() && bias.requires_grad()](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
      // The saved input and weight keep their history, so create_graph differentiates through both.
      const Tensor x = unbatched ? sx.get().unsqueeze(0) : sx.get(), w = sw.get();
      const Tensor go = (unbatched ? g[0].unsqueeze(0) : g[0]).to(w.dtype());
      Tensor gx, gw, gb;
      if (need_x) {
        gx = conv2d(go, w, Tensor(), {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                    {p.dilation[0], p.dilation[1]}, p.groups);
        if (extended) gx = gx.slice(2, 0, in_h).slice(3, 0, in_w);
        if (unbatched) gx = gx.squeeze(0);
      }
      if (need_w) gw = conv2d_weight_grad(extended ? pad(x, extend) : x, go, w.shape(), p);
      if (need_b && has_bias) gb = sum(go, {0, 2, 3});
      return {gx, gw, gb};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
