// interpolate: PyTorch's argument rules (size or scale_factor, align_corners for bilinear only,
// output = floor(in * factor)) and the backward formulas. Both modes are linear maps of x, so the
// gradient is a differentiable op (the adjoint map) whose own gradient is the forward map again.
#include "framework/ops/interpolate_kernels.h"

#include <cmath>

#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"

namespace hg {

HG_DEFINE_STUB(interpolate_stub, InterpolateFn);
HG_DEFINE_STUB(interpolate_backward_stub, InterpolateBackwardFn);

namespace {
const OpDef kUpsampleNearest2d{"upsample_nearest2d"};
const OpDef kUpsampleBilinear2d{"upsample_bilinear2d"};
const OpDef kUpsampleNearest2dBackward{"upsample_nearest2d_backward"};
const OpDef kUpsampleBilinear2dBackward{"upsample_bilinear2d_backward"};
constexpr const char* kInterpolateName = "interpolate";

// Runs the map (forward) or its adjoint (backward) from a contiguous [N, C, h, w] tensor into a new
// one of `out_shape`; each records itself as an op whose gradient is the other.
Tensor run_interp(const Tensor& t, const Shape& out_shape, const InterpParams& p, bool adjoint);

Tensor interp_op(const OpDef& def, const Tensor& t_in, const Shape& out_shape, const InterpParams& p, bool adjoint) {
  OpCall call(def, {t_in});
  const Tensor t = internal::contiguous(call.input(0));
  Tensor out = empty(out_shape, TensorOptions(t.dtype()).device(t.device()));
  const int64_t planes = out_shape[0] * out_shape[1];
  const Tensor in3 = internal::alias_contiguous(t, {planes, t.size(2), t.size(3)});
  const Tensor out3 = internal::alias_contiguous(out, {planes, out_shape[2], out_shape[3]});
  if (out.numel()) {
    if (adjoint)
      interpolate_backward_stub(t.device().type, out3, in3, p);
    else
      interpolate_stub(t.device().type, out3, in3, p);
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [p, adjoint, shape = t.shape(), dtype = t.dtype()](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      return {run_interp(g[0].to(dtype), shape, p, !adjoint)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor run_interp(const Tensor& t, const Shape& out_shape, const InterpParams& p, bool adjoint) {
  const OpDef& def = p.bilinear ? (adjoint ? kUpsampleBilinear2dBackward : kUpsampleBilinear2d)
                                : (adjoint ? kUpsampleNearest2dBackward : kUpsampleNearest2d);
  return interp_op(def, t, out_shape, p, adjoint);
}
}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  const char* name = kInterpolateName;
  HG_CHECK(o.mode == "nearest" || o.mode == "bilinear", name, "unknown mode '{}'; expected nearest or bilinear",
           o.mode);
  InterpParams p;
  p.bilinear = o.mode == "bilinear";
  HG_CHECK(x.defined(), name, "got an undefined tensor");
  HG_CHECK(x.dim() == 4, name, "expected a 4-d [N, C, H, W] input for {} mode, got shape {}", o.mode, x.shape());
  HG_CHECK(is_floating(x.dtype()), name, "expected a floating-point input, got {}", x.dtype());
  HG_CHECK(p.bilinear || !o.align_corners.has_value(), name,
           "align_corners can only be set with bilinear mode (got mode {})", o.mode);
  p.align_corners = o.align_corners.value_or(false);
  HG_CHECK(o.size.empty() != o.scale_factor.empty(), name, "give exactly one of size and scale_factor");
  HG_CHECK(o.size.empty() || !o.recompute_scale_factor.value_or(false), name,
           "recompute_scale_factor is not meaningful with an explicit size");
  Shape out_shape = x.shape();
  if (!o.size.empty()) {
    HG_CHECK(o.size.size() <= 2, name, "size takes one value or two (H, W), got {}", o.size.size());
    out_shape[2] = o.size[0], out_shape[3] = o.size.back();
  } else {
    HG_CHECK(o.scale_factor.size() <= 2, name, "scale_factor takes one value or two (H, W), got {}",
             o.scale_factor.size());
    for (int d = 0; d < 2; ++d) {
      const double f = o.scale_factor[o.scale_factor.size() == 2 ? static_cast<size_t>(d) : 0];
      HG_CHECK(std::isfinite(f) && f > 0, name, "scale_factor must be positive and finite, got {}", f);
      out_shape[2 + static_cast<size_t>(d)] = static_cast<int64_t>(std::floor(static_cast<double>(x.size(2 + d)) * f));
      if (!o.recompute_scale_factor.value_or(false)) p.scale[d] = f;
    }
  }
  HG_CHECK(x.size(2) > 0 && x.size(3) > 0 && out_shape[2] > 0 && out_shape[3] > 0, name,
           "input and output sizes should be greater than 0, got input {} and output {}", x.shape(), out_shape);
  return run_interp(x, out_shape, p, false);
}

}  // namespace hg
