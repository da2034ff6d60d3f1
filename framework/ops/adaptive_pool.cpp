// adaptive_avg_pool2d and adaptive_max_pool2d: checks, shapes and backward formulas. The average
// pool is linear: its gradient is a differentiable op (adaptive_avg_pool2d_backward) whose own
// gradient is the pool again. The max pool's gradient scatters through the saved indices with
// max_pool2d's kernel, or with scatter_add (public ops) under create_graph.
#include "framework/ops/adaptive_pool_kernels.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/pool_kernels.h"

namespace hg {

HG_DEFINE_STUB(adaptive_avg_pool2d_stub, AdaptiveAvgPool2dFn);
HG_DEFINE_STUB(adaptive_avg_pool2d_backward_stub, AdaptiveAvgPool2dBackwardFn);
HG_DEFINE_STUB(adaptive_max_pool2d_stub, AdaptiveMaxPool2dFn);

namespace {
const OpDef kAdaptiveAvgPool2d{"adaptive_avg_pool2d"};
const OpDef kAdaptiveAvgPool2dBackward{"adaptive_avg_pool2d_backward"};
const OpDef kAdaptiveMaxPool2d{"adaptive_max_pool2d"};
const OpDef kAdaptiveMaxPool2dBackward{"adaptive_max_pool2d_backward", false};

// The input as contiguous [P, H, W] planes, and the result's shapes.
struct AdaptivePlan {
  Tensor x;  // contiguous, detached
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  Shape out_shape;
};

AdaptivePlan plan_adaptive(const char* op, const Tensor& input, const std::vector<int64_t>& size) {
  HG_CHECK(input.defined(), op, "got an undefined tensor");
  HG_CHECK(input.dim() == 3 || input.dim() == 4, op, "expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape {}",
           input.shape());
  HG_CHECK(is_floating(input.dtype()), op, "expected a floating-point input, got {}", input.dtype());
  HG_CHECK(size.size() == 1 || size.size() == 2, op, "output_size must have 1 or 2 values, got {}", size.size());
  for (int64_t d = input.dim() - 3; d < input.dim(); ++d)
    HG_CHECK(input.size(d) > 0, op, "expected non-empty C, H and W, got shape {}", input.shape());
  AdaptivePlan p;
  p.oh = size[0], p.ow = size.size() == 2 ? size[1] : size[0];
  HG_CHECK(p.oh >= 0 && p.ow >= 0, op, "output_size must be non-negative, got {}", fmt::join(size, ", "));
  p.x = internal::contiguous(input);
  p.h = input.size(-2), p.w = input.size(-1);
  p.planes = input.numel() / (p.h * p.w);
  p.out_shape = input.shape();
  p.out_shape[p.out_shape.size() - 2] = p.oh;
  p.out_shape[p.out_shape.size() - 1] = p.ow;
  return p;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, std::vector<int64_t> size) {
  OpCall call(kAdaptiveAvgPool2dBackward, {grad_out});
  const Tensor go = internal::contiguous(call.input(0));
  Tensor gx = empty(x_shape, TensorOptions(go.dtype()).device(go.device()));
  const int64_t h = x_shape[x_shape.size() - 2], w = x_shape.back(), planes = h * w > 0 ? gx.numel() / (h * w) : 0;
  if (gx.numel())
    adaptive_avg_pool2d_backward_stub(go.device().type, internal::alias_contiguous(gx, {planes, h, w}),
                                      internal::alias_contiguous(go, {planes, size[0], size[1]}));
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [size](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      return {adaptive_avg_pool2d(g[0], size)};
    };
  }
  call.finish({&gx}, std::move(bw));
  return gx;
}
}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input_in, std::vector<int64_t> output_size) {
  OpCall call(kAdaptiveAvgPool2d, {input_in});
  const Tensor& input = call.input(0);
  const AdaptivePlan p = plan_adaptive(kAdaptiveAvgPool2d.name, input, output_size);
  Tensor out = empty(p.out_shape, TensorOptions(p.x.dtype()).device(p.x.device()));
  if (out.numel())
    adaptive_avg_pool2d_stub(p.x.device().type, internal::alias_contiguous(out, {p.planes, p.oh, p.ow}),
                             internal::alias_contiguous(p.x, {p.planes, p.h, p.w}));
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [x_shape = input.shape(), dtype = p.x.dtype(),
          size = std::vector<int64_t>{p.oh, p.ow}](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      return {adaptive_avg_pool2d_backward(g[0].to(dtype), x_shape, size)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

std::pair<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input_in, std::vector<int64_t> output_size) {
  OpCall call(kAdaptiveMaxPool2d, {input_in});
  const Tensor& input = call.input(0);
  const AdaptivePlan p = plan_adaptive(kAdaptiveMaxPool2d.name, input, output_size);
  Tensor out = empty(p.out_shape, TensorOptions(p.x.dtype()).device(p.x.device()));
  Tensor idx = empty(p.out_shape, TensorOptions(kInt64).device(p.x.device()));
  if (out.numel())
    adaptive_max_pool2d_stub(p.x.device().type, internal::alias_contiguous(out, {p.planes, p.oh, p.ow}),
                             internal::alias_contiguous(idx, {p.planes, p.oh, p.ow}),
                             internal::alias_contiguous(p.x, {p.planes, p.h, p.w}));
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [si = SavedTensor(idx, kAdaptiveMaxPool2d.name), in_shape = input.shape(), dtype = p.x.dtype(),
          device = p.x.device(), planes = p.planes, h = p.h, w = p.w, oh = p.oh,
          ow = p.ow](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      if (GradMode::is_enabled()) {  // create_graph: each gradient added at its max, in public ops
        const Tensor go = g[0].reshape({planes, oh * ow}).to(dtype);
        const Tensor gx = zeros({planes, h * w}, TensorOptions(dtype).device(device));
        return {scatter_add(gx, 1, si.get().reshape({planes, oh * ow}), go).reshape(in_shape)};
      }
      OpCall bcall(kAdaptiveMaxPool2dBackward, {g[0]});
      Tensor gx = empty(in_shape, TensorOptions(dtype).device(device));
      const Tensor go = internal::dense_as(bcall.input(0), dtype, {1, planes, oh, ow});
      if (gx.numel())
        max_pool2d_backward_stub(device.type, internal::alias_contiguous(gx, {1, planes, h, w}), go,
                                 internal::alias_contiguous(internal::contiguous(si.get()), {1, planes, oh, ow}));
      bcall.finish({&gx});
      return {gx};
    };
  }
  call.finish({&out, &idx}, std::move(bw));
  return {out, idx};
}

}  // namespace hg
