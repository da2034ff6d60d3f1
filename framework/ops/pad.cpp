// pad: argument checks and the backward formulas. Constant mode is a fill and one strided copy
// (any dtype, any number of dims, negative pads crop), its gradient the opposite crop/pad of the
// output gradient. The other modes gather through pad_stub, and their gradient is a
// differentiable op (pad_backward, a scatter-add) whose own gradient is pad again: both maps are
// linear and adjoint, so create_graph differentiates as far as asked.
#include "framework/ops/pad_kernels.h"

#include "framework/op.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"

namespace hg {

HG_DEFINE_STUB(pad_stub, PadFn);
HG_DEFINE_STUB(pad_backward_stub, PadBackwardFn);

namespace {
// One op name per mode, as PyTorch's (constant_pad_nd, reflection_padNd, ...): their autocast
// rows differ (PyTorch's CPU autocast runs reflect and replicate in float32).
const OpDef kConstantPad{"constant_pad"};
const OpDef kReflectionPad{"reflection_pad"};
const OpDef kReplicationPad{"replication_pad"};
const OpDef kCircularPad{"circular_pad"};
const OpDef kPadBackward{"pad_backward"};
constexpr const char* kPadName = "pad";

PadMode parse_pad_mode(std::string_view mode) {
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "replicate") return PadMode::Replicate;
  if (mode == "circular") return PadMode::Circular;
  fail(kPadName, "unknown mode '{}'; expected constant, reflect, replicate or circular", mode);
}

const OpDef& pad_op_for(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return kConstantPad;
    case PadMode::Reflect: return kReflectionPad;
    case PadMode::Replicate: return kReplicationPad;
    case PadMode::Circular: return kCircularPad;
  }
  return kConstantPad;
}

// The padded shape: dim d from the end grows by pads[2 (d - 1)] + pads[2 (d - 1) + 1].
Shape padded_shape(const Shape& shape, const std::vector<int64_t>& pads) {
  Shape out = shape;
  const size_t nd = shape.size();
  for (size_t p = 0; p < pads.size() / 2; ++p) out[nd - 1 - p] += pads[2 * p] + pads[2 * p + 1];
  return out;
}

Tensor constant_pad(OpCall& call, const std::vector<int64_t>& pads, double value) {
  const Tensor& x = call.input(0);
  HG_CHECK(pads.size() <= 2 * static_cast<size_t>(x.dim()), kPadName,
           "{} pad values are too many for a {}-d input (at most two per dim)", pads.size(), x.dim());
  const Shape out_shape = padded_shape(x.shape(), pads);
  for (size_t d = 0; d < out_shape.size(); ++d)
    HG_CHECK(out_shape[d] >= 0, kPadName, "pads {} crop dim {} of size {} below zero", fmt::join(pads, ", "), d,
             x.shape()[d]);
  Tensor out = empty(out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel()) {
    fill_stub(x.device().type, out, value);
    // The part of x that survives, copied into the part of out it lands in: both are views
    // offset by the positive pad (out) or the crop (x) along each padded dim.
    Shape region = x.shape();
    int64_t in_offset = x.offset(), out_offset = 0;
    for (size_t p = 0; p < pads.size() / 2; ++p) {
      const size_t d = x.shape().size() - 1 - p;
      const int64_t before = pads[2 * p], after = pads[2 * p + 1];
      region[d] = x.shape()[d] - std::max<int64_t>(-before, 0) - std::max<int64_t>(-after, 0);
      in_offset += std::max<int64_t>(-before, 0) * x.strides()[d];
      out_offset += std::max<int64_t>(before, 0) * out.strides()[d];
    }
    if (numel_of(region) > 0)
      copy_stub(x.device().type, internal::alias(out, region, out.strides(), out_offset),
                internal::alias(x, region, x.strides(), in_offset));
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [pads](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      std::vector<int64_t> back(pads.size());
      for (size_t i = 0; i < pads.size(); ++i) back[i] = -pads[i];
      return {pad(g[0], back, "constant")};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

// The three padded dims of a non-constant pad, and the [B, d0, d1, d2] shapes the kernels see.
struct PadPlan {
  PadGeometry g;
  Shape in4, out4, out_shape;
};

PadPlan plan_pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, const char* mode_name) {
  const auto k = static_cast<int64_t>(pads.size() / 2);
  HG_CHECK(k >= 1 && k <= 3, kPadName, "{} mode pads the last 1, 2 or 3 dims: expected 2, 4 or 6 pad values, got {}",
           mode_name, pads.size());
  const bool circular = mode == PadMode::Circular;
  HG_CHECK(x.dim() == k + 2 || (!circular && x.dim() == k + 1), kPadName,
           "{} mode with {} pad values expects a {}-d input{}, got shape {}", mode_name, pads.size(), k + 2,
           circular ? "" : fmt::format(" (or {}-d unbatched)", k + 1), x.shape());
  HG_CHECK(is_floating(x.dtype()), kPadName, "{} mode expects a floating-point input, got {}", mode_name, x.dtype());
  PadPlan plan;
  plan.g.mode = mode;
  plan.out_shape = padded_shape(x.shape(), pads);
  int64_t plane = 1;
  for (int64_t p = 0; p < k; ++p) {
    const auto d = static_cast<size_t>(x.dim() - 1 - p);
    const int64_t n = x.shape()[d], before = pads[2 * p], after = pads[2 * p + 1];
    HG_CHECK(n > 0, kPadName, "{} mode cannot pad dim {} of size 0 (input shape {})", mode_name, d, x.shape());
    if (mode == PadMode::Reflect)
      HG_CHECK(before < n && after < n, kPadName,
               "reflect pads must be smaller than the dim they pad: got ({}, {}) for dim {} of size {}", before, after,
               d, n);
    if (circular) {
      const int64_t kept = n - std::max<int64_t>(-before, 0) - std::max<int64_t>(-after, 0);
      HG_CHECK(kept > 0 && before <= kept && after <= kept, kPadName,
               "circular pads ({}, {}) for dim {} of size {} wrap around more than once", before, after, d, n);
    }
    HG_CHECK(plan.out_shape[d] > 0, kPadName, "pads ({}, {}) leave dim {} of size {} empty", before, after, d, n);
    const auto slot = static_cast<size_t>(2 - p);
    plan.g.in[slot] = n, plan.g.out[slot] = plan.out_shape[d], plan.g.before[slot] = before;
    plane *= n;
  }
  const int64_t batch = plane ? x.numel() / plane : 0;
  plan.in4 = {batch, plan.g.in[0], plan.g.in[1], plan.g.in[2]};
  plan.out4 = {batch, plan.g.out[0], plan.g.out[1], plan.g.out[2]};
  return plan;
}

// The gradient of a non-constant pad: grad_out [.., out dims] scattered back to x's shape.
Tensor pad_backward(const Tensor& grad_out_in, const PadPlan& plan, const Shape& x_shape,
                    const std::vector<int64_t>& pads, PadMode mode) {
  OpCall call(kPadBackward, {grad_out_in});
  const Tensor go = internal::contiguous(call.input(0));
  Tensor gx = empty(x_shape, TensorOptions(go.dtype()).device(go.device()));
  if (gx.numel())
    pad_backward_stub(go.device().type, internal::alias_contiguous(gx, plan.in4),
                      internal::alias_contiguous(go, plan.out4), plan.g);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [pads, mode](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      const char* names[] = {"constant", "reflect", "replicate", "circular"};
      return {pad(g[0], pads, names[static_cast<int>(mode)])};
    };
  }
  call.finish({&gx}, std::move(bw));
  return gx;
}
}  // namespace

Tensor pad(const Tensor& x_in, const std::vector<int64_t>& pads, std::string_view mode_name,
           std::optional<double> value) {
  const PadMode mode = parse_pad_mode(mode_name);
  OpCall call(pad_op_for(mode), {x_in});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), kPadName, "got an undefined tensor");
  HG_CHECK(pads.size() % 2 == 0, kPadName, "expected an even number of pad values (before, after per dim), got {}",
           pads.size());
  if (mode == PadMode::Constant) return constant_pad(call, pads, value.value_or(0.0));
  HG_CHECK(!value.has_value() || *value == 0.0, kPadName, "{} mode takes no fill value (got {})", mode_name,
           value.value_or(0.0));
  const PadPlan plan = plan_pad(x, pads, mode,
                                mode == PadMode::Reflect     ? "reflect"
                                : mode == PadMode::Replicate ? "replicate"
                                                             : "circular");
  const Tensor xc = internal::contiguous(x);
  Tensor out = empty(plan.out_shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel())
    pad_stub(x.device().type, internal::alias_contiguous(out, plan.out4), internal::alias_contiguous(xc, plan.in4),
             plan.g);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [plan, x_shape = x.shape(), dtype = x.dtype(), pads, mode](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor()};
      return {pad_backward(g[0].to(dtype), plan, x_shape, pads, mode)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
