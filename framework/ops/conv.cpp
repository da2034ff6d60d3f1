// conv2d: argument checks, output geometry and the backward formula; the arithmetic lives in
// the three stubs (kernels/cpu/conv/conv.cpp on the CPU).
#include "framework/ops/conv_kernels.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/conv_args.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/pool.h"
#include "framework/ops/unary_kernels.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(conv2d_forward_stub, Conv2dForwardFn);
HG_DEFINE_STUB(conv2d_backward_data_stub, Conv2dBackwardDataFn);
HG_DEFINE_STUB(conv2d_backward_filter_stub, Conv2dBackwardFilterFn);
HG_DEFINE_OPTIONAL_STUB(conv2d_backward_stub, Conv2dBackwardFn);
HG_DEFINE_OPTIONAL_STUB(max_pool_2x2_codes_stub, MaxPool2x2CodesFn);
HG_DEFINE_OPTIONAL_STUB(conv2d_relu_max_pool_forward_stub, Conv2dReluMaxPoolForwardFn);
HG_DEFINE_OPTIONAL_STUB(relu_max_pool_2x2_backward_stub, ReluMaxPool2x2BackwardFn);
HG_DEFINE_OPTIONAL_STUB(conv2d_relu_backward_stub, Conv2dReluBackwardFn);

bool conv2d_relu_in_kernel(DeviceType dev) { return dev == kCPU || dev == kCUDA; }
bool conv2d_channels_last_in_kernel(DeviceType dev, Dtype dtype) {
  return dev == kCPU || (dev == kCUDA && dtype != kFloat64);
}
bool conv2d_weight_as_given_in_kernel(DeviceType dev) { return dev == kCPU; }
bool conv2d_widened_weight_grad_in_kernel(DeviceType dev) { return dev == kCPU; }

namespace {
// Its weight gradient may go on widened (widened_gradient_wanted: a float32 weight cast by autocast)
// where the device writes that form (conv2d_widened_weight_grad_in_kernel).
const OpDef kConv2d{"conv2d", {.writes_widened_gradients = true}};
// conv2d then relu as one op: the ReLU runs inside the forward kernel's pass over the output
// where the backend's kernel supports it (conv2d_relu_in_kernel).
const OpDef kConv2dRelu{"conv2d_relu", true};
// conv2d_relu then a 2x2 max pool as one op, where the device has the pooling kernels.
const OpDef kConv2dReluMaxPool{"conv2d_relu_max_pool2d", true};
// The backward runs as its own (recorded, non-differentiable) op, so an OpRecorder shows which
// dtypes the gradient kernels ran in.
const OpDef kConv2dBackward{"conv2d_backward", false};
// Under create_graph the two gradients run as differentiable ops instead (PyTorch's
// convolution_backward): both are bilinear, so their own gradients are convolutions again.
const OpDef kConv2dInputGrad{"conv2d_input_grad", true};
const OpDef kConv2dWeightGrad{"conv2d_weight_grad", true};

Tensor conv2d_plain(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  return conv2d(x, w, Tensor(), {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                {p.dilation[0], p.dilation[1]}, p.groups);
}

// The gradient of conv2d's 4-d input x (of shape x_shape) for grad_out, with weight w. Since
// <gg, input_grad(go, w)> = <go, conv2d(gg, w)> = <w, weight_grad(go, gg)>, its gradients are
// those two.
Tensor conv2d_input_grad(const Tensor& grad_out, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  OpCall call(kConv2dInputGrad, {grad_out, w});
  const Tensor wc = internal::contiguous(call.input(1));
  const Tensor go = internal::contiguous(internal::cast(call.input(0), wc.dtype()));
  Tensor gx = empty(x_shape, TensorOptions(wc.dtype()).device(wc.device()));
  if (gx.numel()) conv2d_backward_data_stub(wc.device().type, gx, go, wc, p);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sg = SavedTensor(call.input(0), "conv2d_input_grad"), sw = SavedTensor(call.input(1), "conv2d_input_grad"),
          p](const TensorList& g) -> TensorList {
      const Tensor go = sg.get(), w = sw.get();
      return {conv2d_plain(g[0].to(w.dtype()), w, p), conv2d_weight_grad(go, g[0].to(w.dtype()), w.shape(), p)};
    };
  }
  call.finish({&gx}, std::move(bw));
  return gx;
}

}  // namespace

// The gradient of conv2d's weight (of shape w_shape) for grad_out and input x: <gg,
// weight_grad(go, x)> = <go, conv2d(x, gg)> = <x, input_grad(go, gg)>.
Tensor conv2d_weight_grad(const Tensor& grad_out, const Tensor& x, const Shape& w_shape, const Conv2dParams& p) {
  OpCall call(kConv2dWeightGrad, {grad_out, x});
  const Tensor xc = internal::contiguous(call.input(1));
  const Tensor go = internal::contiguous(internal::cast(call.input(0), xc.dtype()));
  Tensor gw = empty(w_shape, TensorOptions(xc.dtype()).device(xc.device()));
  conv2d_backward_filter_stub(xc.device().type, gw, Tensor(), go, xc, p);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sg = SavedTensor(call.input(0), "conv2d_weight_grad"), sx = SavedTensor(call.input(1), "conv2d_weight_grad"),
          p](const TensorList& g) -> TensorList {
      const Tensor go = sg.get(), x = sx.get();
      return {conv2d_plain(x, g[0].to(x.dtype()), p), conv2d_input_grad(go, g[0].to(x.dtype()), x.shape(), p)};
    };
  }
  call.finish({&gw}, std::move(bw));
  return gw;
}

namespace {

// The gradient of a 2x2 max pool's input [N,O,H,W] for the pooled gradient g [N,O,H/2,W/2],
// through the ReLU before it, in public ops (create_graph): each g copied to its window, times
// the 0/1 mask of chosen, positive elements, a constant (the pool and the ReLU are piecewise
// linear).
Tensor relu_max_pool_grad_recorded(const Tensor& g, const Tensor& which, const Tensor& pooled, const Shape& shape) {
  const int64_t n = shape[0], o = shape[1], h = shape[2], w = shape[3], ph = h / 2, pw = w / 2;
  Tensor mask = empty(shape, TensorOptions(pooled.dtype()).device(pooled.device()));
  relu_max_pool_2x2_backward_stub(pooled.device().type, mask, ones_like(pooled), which, pooled);
  Tensor up =
      g.to(pooled.dtype()).reshape({n, o, ph, 1, pw, 1}).expand({n, o, ph, 2, pw, 2}).reshape({n, o, 2 * ph, 2 * pw});
  if (2 * pw < w) up = cat({up, zeros({n, o, 2 * ph, w - 2 * pw}, TensorOptions(up.dtype()).device(up.device()))}, 3);
  if (2 * ph < h) up = cat({up, zeros({n, o, h - 2 * ph, w}, TensorOptions(up.dtype()).device(up.device()))}, 2);
  return up * mask;
}

// conv2d, conv2d_relu and conv2d_relu_max_pool2d: one argument check, one forward, one
// backward; `relu` adds the ReLU and its gradient mask (taken from the saved output), `pool` a
// 2x2 max pool after it (on a device with its kernels).
Tensor conv2d_op(const OpDef& def, bool relu, bool pool, const Tensor& input_in, const Tensor& weight_in,
                 const Tensor& bias_in, const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                 const std::vector<int64_t>& dilation, int64_t groups) {
  const char* op = def.name;
  OpCall call(def, {input_in, weight_in, bias_in});
  const Tensor& input = call.input(0);
  const Tensor& weight = call.input(1);
  const Tensor& bias = call.input(2);
  conv_args::check_tensors(op, input, weight, bias, "[N, C, H, W]", "[out, in/groups, kh, kw]");
  Conv2dParams p;
  conv_args::pair(op, stride, "stride", p.stride);
  conv_args::pair(op, padding, "padding", p.padding);
  conv_args::pair(op, dilation, "dilation", p.dilation);
  p.groups = groups;
  for (int i = 0; i < 2; ++i) {
    HG_CHECK(p.stride[i] > 0 && p.dilation[i] > 0 && p.padding[i] >= 0, op,
             "stride and dilation must be positive and padding non-negative, got stride {}, padding {}, dilation {}",
             stride, padding, dilation);
  }
  HG_CHECK(groups > 0, op, "groups must be positive, got {}", groups);
  const bool unbatched = input.dim() == 3;
  const Tensor x = unbatched ? internal::unsqueezed(input, 0) : input.detach();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t o = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  HG_CHECK(kh > 0 && kw > 0, op, "weight shape {} has an empty kernel", weight.shape());
  HG_CHECK(weight.size(1) * groups == c, op,
           "input shape {} has {} channels, but weight shape {} with groups={} expects {}", input.shape(), c,
           weight.shape(), groups, weight.size(1) * groups);
  HG_CHECK(o % groups == 0, op, "weight shape {}: {} output channels are not divisible by groups={}", weight.shape(), o,
           groups);
  HG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == o), op,
           "bias must have shape [{}] for weight shape {}, got {}", o, weight.shape(), bias.shape());
  const int64_t eff_h = p.dilation[0] * (kh - 1) + 1, eff_w = p.dilation[1] * (kw - 1) + 1;
  const int64_t ph = h + 2 * p.padding[0], pw = w + 2 * p.padding[1];
  HG_CHECK(ph >= eff_h && pw >= eff_w, op,
           "input shape {} padded to {}x{} is smaller than the (dilated) kernel {}x{} of weight shape {}",
           input.shape(), ph, pw, eff_h, eff_w, weight.shape());
  const int64_t oh = (ph - eff_h) / p.stride[0] + 1, ow = (pw - eff_w) / p.stride[1] + 1;
  HG_CHECK(!pool || (oh >= 2 && ow >= 2), op, "the convolution's output ({}x{}) is smaller than the 2x2 pooling window",
           oh, ow);

  // Channels-last, as PyTorch's: conv2d's output (and each gradient, in its input's layout) is
  // channels-last when the input or the weight is. A backend whose kernels take NHWC gets the
  // tensors so; the others run on NCHW copies and the results are laid out after, so both
  // layouts give the same values there. (The fused relu/pool variants stay NCHW.)
  const DeviceType dev = x.device().type;
  const bool x_cl = x.dim() == 4 && x.suggest_memory_format() == MemoryFormat::ChannelsLast;
  const bool w_cl = weight.suggest_memory_format() == MemoryFormat::ChannelsLast;
  const bool channels_last = !relu && !pool && !unbatched && (x_cl || w_cl);
  const MemoryFormat kernel_format = channels_last && conv2d_channels_last_in_kernel(dev, x.dtype())
                                         ? MemoryFormat::ChannelsLast
                                         : MemoryFormat::Contiguous;
  // The weight: in the activations' layout (CUDA's kernels), or where the kernels take it as it is
  // (the CPU's), channels-last only when it is so and the call runs channels-last.
  const bool weight_cl =
      kernel_format == MemoryFormat::ChannelsLast && (!conv2d_weight_as_given_in_kernel(dev) || w_cl);
  const MemoryFormat weight_format = weight_cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  const Tensor xc = internal::laid_out(x, kernel_format), wc = internal::laid_out(weight, weight_format);
  const Tensor bc = bias.defined() ? internal::contiguous(bias) : Tensor();
  Tensor pooled, which;  // pool: the pooled output and each window's choice, 0..3
  if (pool) {
    pooled = empty({n, o, oh / 2, ow / 2}, TensorOptions(x.dtype()).device(x.device()));
    which = empty(pooled.shape(), TensorOptions(kUInt8).device(x.device()));
  }
  // One pass where the backend can: each sample's convolution output pooled while in cache,
  // never kept whole. Otherwise the convolution's whole output, then the pool over it.
  const bool pooled_in_pass =
      pool && conv2d_relu_max_pool_forward_stub.has(dev) &&
      (pooled.numel() == 0 || conv2d_relu_max_pool_forward_stub(dev, pooled, which, xc, wc, bc, p, oh, ow));
  Tensor out4 = pooled;
  if (!pooled_in_pass) {
    out4 = empty({n, o, oh, ow}, TensorOptions(x.dtype()).device(x.device()), kernel_format);
    if (out4.numel()) {
      Conv2dParams fwd = p;
      fwd.relu = relu && conv2d_relu_in_kernel(dev);
      conv2d_forward_stub(dev, out4, xc, wc, bc, fwd);
      if (relu && !fwd.relu) unary_stub(dev, UnaryOp::Relu, out4, out4, 0, 0);
    }
    if (pool) {
      if (pooled.numel()) max_pool_2x2_codes_stub(dev, pooled, which, out4);
      out4 = pooled;  // the convolution's output is dropped here
    }
  }
  if (channels_last) out4 = internal::laid_out(out4, MemoryFormat::ChannelsLast);
  Tensor out = unbatched ? out4.squeeze(0) : out4;

  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(xc, op), sw = SavedTensor(wc, op), si = SavedTensor(input, op),
          swi = SavedTensor(weight, op), sy = relu ? SavedTensor::output(out, op) : SavedTensor(), relu, pool, which,
          conv_shape = Shape{n, o, oh, ow}, p, has_bias = bias.defined(), need_x = input.requires_grad(),
          need_w = weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(), unbatched,
          in_shape = input.shape(), kernel_format, weight_format, x_cl = channels_last && x_cl,
          w_cl = channels_last && w_cl](const TensorList& grads) -> TensorList {
      if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
      if (GradMode::is_enabled()) {
        // create_graph: the gradients as differentiable ops of the saved input and weight, the
        // pool's and the ReLU's as public ops too.
        Tensor go;
        if (pool) {
          const Tensor pooled = sy.get();
          go = relu_max_pool_grad_recorded(unbatched ? grads[0].unsqueeze(0) : grads[0], which,
                                           (unbatched ? pooled.unsqueeze(0) : pooled).detach(), conv_shape);
        } else {
          go = relu ? relu_gradient(grads[0], sy.get()) : grads[0];
          if (unbatched) go = go.unsqueeze(0);
        }
        const Tensor x4 = unbatched ? si.get().unsqueeze(0) : si.get();
        const Tensor w = swi.get();
        return {need_x ? conv2d_input_grad(go, w, x4.shape(), p).reshape(in_shape) : Tensor(),
                need_w ? conv2d_weight_grad(go, x4, w.shape(), p) : Tensor(),
                need_b ? go.to(w.dtype()).sum({0, 2, 3}) : Tensor()};
      }
      // With the ReLU (and the pool), g is the op's own output gradient: the convolution's is made
      // from it below, piece by piece inside the backward passes where the device can, else whole.
      Tensor g = grads[0], out4;  // out4: the op's output, 4-d (the ReLU's mask; the pooled values)
      if (relu) {
        const Tensor y = sy.get();
        out4 = unbatched ? y.unsqueeze(0) : y;
        g = internal::dense_as(grads[0], y.dtype(), out4.shape());
      }
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      OpCall bcall(kConv2dBackward, {g, x, w});
      Tensor go = bcall.input(0).dtype() == x.dtype() ? bcall.input(0) : bcall.input(0).to(x.dtype());
      if (!relu) go = internal::laid_out(go.reshape({x.size(0), w.size(0), go.size(-2), go.size(-1)}), kernel_format);
      const DeviceType dev = x.device().type;
      Tensor gx, gw, gb;
      if (need_x) gx = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()), kernel_format);
      if (need_w || need_b) {
        // float32 holding the 16-bit gradient's values, where the engine lets it go on so (the
        // weight is an autocast cast of a float32 leaf): the kernel writes it in the pass that lays
        // it out, and the cast back is skipped.
        const bool widened = need_w && is_reduced_float(w.dtype()) && widened_gradient_wanted(1) &&
                             conv2d_widened_weight_grad_in_kernel(dev);
        gw = empty(w.shape(), TensorOptions(widened ? kFloat32 : w.dtype()).device(w.device()), weight_format);
        if (has_bias) gb = empty({w.size(0)}, TensorOptions(w.dtype()).device(w.device()));
      }
      bool done = false;
      if (relu) {
        const Conv2dReluGrad from{go, out4, pool ? which : Tensor()};
        done =
            go.numel() && (!need_x || gx.numel()) && conv2d_relu_backward_stub.has(dev) &&
            conv2d_relu_backward_stub(dev, need_x ? gx : Tensor(), gw, gb, from, x, w, p, conv_shape[2], conv_shape[3]);
        if (!done && pool) {
          Tensor gy = empty(conv_shape, TensorOptions(go.dtype()).device(go.device()));
          relu_max_pool_2x2_backward_stub(dev, gy, go, which, out4);
          go = gy;
        } else if (!done) {
          go = relu_gradient(go, out4);
        }
      }
      done = done || (need_x && gw.defined() && gx.numel() && conv2d_backward_stub.has(dev) &&
                      conv2d_backward_stub(dev, gx, gw, gb, go, x, w, p));
      if (!done) {
        if (need_x && gx.numel()) conv2d_backward_data_stub(dev, gx, go, w, p);
        if (gw.defined()) conv2d_backward_filter_stub(dev, gw, gb, go, x, p);
      }
      // Each gradient in its input's layout.
      const auto layout = [](const Tensor& t, bool cl) {
        return cl ? internal::laid_out(t, MemoryFormat::ChannelsLast) : internal::contiguous(t);
      };
      if (need_x) gx = unbatched ? gx.reshape(in_shape) : layout(gx, x_cl);
      if (gw.defined()) gw = layout(gw, w_cl);
      bcall.finish({&gx, &gw, &gb});
      return {gx, need_w ? gw : Tensor(), need_b ? gb : Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return conv2d_op(kConv2d, false, false, input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return conv2d_op(kConv2dRelu, true, false, input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv2d_relu_max_pool2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                              std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                              int64_t groups) {
  const bool fused = input.defined() && max_pool_2x2_codes_stub.has(input.device().type) &&
                     relu_max_pool_2x2_backward_stub.has(input.device().type);
  if (!fused) return max_pool2d(conv2d_relu(input, weight, bias, stride, padding, dilation, groups), {2}, {2});
  return conv2d_op(kConv2dReluMaxPool, true, true, input, weight, bias, stride, padding, dilation, groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  HG_CHECK(input.defined() && weight.defined(), "conv1d", "got an undefined input or weight");
  HG_CHECK(input.dim() == 2 || input.dim() == 3, "conv1d",
           "expected a 2-d (unbatched) or 3-d input [N, C, L], got shape {}", input.shape());
  HG_CHECK(weight.dim() == 3, "conv1d", "expected a 3-d weight [out, in/groups, k], got shape {}", weight.shape());
  HG_CHECK(stride > 0 && dilation > 0 && padding >= 0, "conv1d",
           "stride and dilation must be positive and padding non-negative, got stride {}, padding {}, dilation {}",
           stride, padding, dilation);
  HG_CHECK(groups > 0, "conv1d", "groups must be positive, got {}", groups);
  const int64_t c = input.size(input.dim() - 2);
  HG_CHECK(weight.size(1) * groups == c, "conv1d",
           "input of shape {} has {} channels, but weight of shape {} with groups {} expects {}", input.shape(), c,
           weight.shape(), groups, weight.size(1) * groups);
  const int64_t len = input.size(-1), span = dilation * (weight.size(2) - 1) + 1;
  HG_CHECK(len + 2 * padding >= span, "conv1d",
           "input length {} (padded by {} each side) is shorter than the kernel span {}", len, padding, span);
  const int64_t h = input.dim() - 1;  // the height-1 dim conv2d sees
  return conv2d(input.unsqueeze(h), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups)
      .squeeze(h);
}

}  // namespace hg
