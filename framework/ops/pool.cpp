// max_pool2d and avg_pool2d: argument checks, output sizes and backward formulas; the loops
// live in kernels/cpu/pool.cpp.
#include "framework/ops/pool_kernels.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(max_pool2d_stub, MaxPool2dFn);
HG_DEFINE_STUB(max_pool2d_backward_stub, MaxPool2dBackwardFn);
HG_DEFINE_STUB(avg_pool2d_stub, AvgPool2dFn);
HG_DEFINE_STUB(avg_pool2d_backward_stub, AvgPool2dBackwardFn);

namespace {
const OpDef kMaxPool2d{"max_pool2d", true};
const OpDef kMaxPool2dBackward{"max_pool2d_backward", false};
const OpDef kAvgPool2d{"avg_pool2d", true};
const OpDef kAvgPool2dBackward{"avg_pool2d_backward", false};
// Under create_graph avg_pool2d's gradient runs as this differentiable op: it is the adjoint of
// avg_pool2d (linear), so its own gradient is avg_pool2d again.
const OpDef kAvgPool2dInputGrad{"avg_pool2d_input_grad", true};

void pair_arg(const char* op, const std::vector<int64_t>& v, const char* what, int64_t out[2]) {
  HG_CHECK(v.size() == 1 || v.size() == 2, op, "{} must have 1 or 2 values, got {}", what, v.size());
  out[0] = v[0];
  out[1] = v.size() == 2 ? v[1] : v[0];
}

// PyTorch's pooling output size, including its ceil_mode rule: the last window must start
// inside the input or its left padding.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  int64_t num = span + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

struct Prepared {
  Tensor x;  // contiguous 4-d, detached
  Pool2dParams p;
  int64_t oh, ow;
  bool unbatched;
};

Prepared prepare(const char* op, const Tensor& input, const std::vector<int64_t>& kernel,
                 const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                 const std::vector<int64_t>& dilation, bool ceil_mode) {
  HG_CHECK(input.defined(), op, "got an undefined tensor");
  HG_CHECK(input.dim() == 3 || input.dim() == 4, op, "expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape {}",
           input.shape());
  HG_CHECK(is_floating(input.dtype()), op, "expected a floating-point input, got {}", input.dtype());
  Prepared r;
  pair_arg(op, kernel, "kernel", r.p.kernel);
  if (stride.empty()) {
    r.p.stride[0] = r.p.kernel[0], r.p.stride[1] = r.p.kernel[1];
  } else {
    pair_arg(op, stride, "stride", r.p.stride);
  }
  pair_arg(op, padding, "padding", r.p.padding);
  pair_arg(op, dilation, "dilation", r.p.dilation);
  for (int i = 0; i < 2; ++i) {
    HG_CHECK(r.p.kernel[i] > 0 && r.p.stride[i] > 0 && r.p.dilation[i] > 0, op,
             "kernel, stride and dilation must be positive, got kernel {}, stride {}, dilation {}", kernel, stride,
             dilation);
    HG_CHECK(r.p.padding[i] >= 0 && r.p.padding[i] <= r.p.kernel[i] / 2, op,
             "padding must be between 0 and half the kernel size, got padding {} for kernel {}", padding, kernel);
  }
  r.unbatched = input.dim() == 3;
  const Tensor x = r.unbatched ? internal::unsqueezed(input, 0) : input.detach();
  r.x = internal::contiguous(x);
  const int64_t h = x.size(2), w = x.size(3);
  r.oh = out_size(h, r.p.kernel[0], r.p.stride[0], r.p.padding[0], r.p.dilation[0], ceil_mode);
  r.ow = out_size(w, r.p.kernel[1], r.p.stride[1], r.p.padding[1], r.p.dilation[1], ceil_mode);
  HG_CHECK(r.oh > 0 && r.ow > 0, op, "input shape {} is too small for kernel {} (output size would be {}x{})",
           input.shape(), kernel, r.oh, r.ow);
  return r;
}

Tensor output_for(const Prepared& r) {
  return empty({r.x.size(0), r.x.size(1), r.oh, r.ow}, TensorOptions(r.x.dtype()).device(r.x.device()));
}

// The gradient arriving for the pooled output, as a contiguous 4-d tensor of x's dtype.
Tensor grad_4d(const Tensor& g, const Tensor& x, int64_t oh, int64_t ow) {
  return internal::dense_as(g, x.dtype(), {x.size(0), x.size(1), oh, ow});
}

// avg_pool2d's input gradient for a 4-d grad_out, as a differentiable op (create_graph).
Tensor avg_pool2d_input_grad(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p, bool ceil_mode) {
  OpCall call(kAvgPool2dInputGrad, {grad_out});
  const Tensor go = internal::contiguous(call.input(0));
  Tensor gx = empty(x_shape, TensorOptions(go.dtype()).device(go.device()));
  if (gx.numel()) avg_pool2d_backward_stub(go.device().type, gx, go, p);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [p, ceil_mode](const TensorList& g) -> TensorList {
      return {avg_pool2d(g[0], {p.kernel[0], p.kernel[1]}, {p.stride[0], p.stride[1]}, {p.padding[0], p.padding[1]},
                         ceil_mode, p.count_include_pad)};
    };
  }
  call.finish({&gx}, std::move(bw));
  return gx;
}
}  // namespace

Tensor max_pool2d(const Tensor& input_in, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  OpCall call(kMaxPool2d, {input_in});
  const Tensor& input = call.input(0);
  Prepared r = prepare("max_pool2d", input, kernel, stride, padding, dilation, ceil_mode);
  Tensor out4 = output_for(r);
  Tensor idx = empty(out4.shape(), TensorOptions(kInt64).device(r.x.device()));
  if (out4.numel()) max_pool2d_stub(r.x.device().type, out4, idx, r.x, r.p);
  Tensor out = r.unbatched ? out4.squeeze(0) : out4;
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [si = SavedTensor(idx, "max_pool2d"), xshape = r.x.shape(), in_shape = input.shape(), dtype = r.x.dtype(),
          device = r.x.device(), oh = r.oh, ow = r.ow](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      if (GradMode::is_enabled()) {  // create_graph: each gradient added at its max, in public ops
        const int64_t n = xshape[0], c = xshape[1];
        const Tensor go = g[0].reshape({n, c, oh * ow}).to(dtype);
        const Tensor gx = zeros({n, c, xshape[2] * xshape[3]}, TensorOptions(dtype).device(device));
        return {scatter_add(gx, 2, si.get().reshape({n, c, oh * ow}), go).reshape(in_shape)};
      }
      OpCall bcall(kMaxPool2dBackward, {g[0]});
      Tensor gx = empty(xshape, TensorOptions(dtype).device(device));
      const Tensor go = grad_4d(bcall.input(0), gx, oh, ow);
      if (gx.numel()) max_pool2d_backward_stub(device.type, gx, go, si.get());
      gx = gx.reshape(in_shape);
      bcall.finish({&gx});
      return {gx};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor avg_pool2d(const Tensor& input_in, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad) {
  OpCall call(kAvgPool2d, {input_in});
  const Tensor& input = call.input(0);
  Prepared r = prepare("avg_pool2d", input, kernel, stride, padding, {1, 1}, ceil_mode);
  r.p.count_include_pad = count_include_pad;
  Tensor out4 = output_for(r);
  if (out4.numel()) avg_pool2d_stub(r.x.device().type, out4, r.x, r.p);
  Tensor out = r.unbatched ? out4.squeeze(0) : out4;
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [p = r.p, xshape = r.x.shape(), in_shape = input.shape(), dtype = r.x.dtype(), device = r.x.device(),
          oh = r.oh, ow = r.ow, ceil_mode](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      if (GradMode::is_enabled()) {
        const Tensor go = g[0].reshape({xshape[0], xshape[1], oh, ow}).to(dtype);
        return {avg_pool2d_input_grad(go, xshape, p, ceil_mode).reshape(in_shape)};
      }
      OpCall bcall(kAvgPool2dBackward, {g[0]});
      Tensor gx = empty(xshape, TensorOptions(dtype).device(device));
      const Tensor go = grad_4d(bcall.input(0), gx, oh, ow);
      if (gx.numel()) avg_pool2d_backward_stub(device.type, gx, go, p);
      gx = gx.reshape(in_shape);
      bcall.finish({&gx});
      return {gx};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
