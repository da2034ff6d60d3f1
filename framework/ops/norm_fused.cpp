// add_layer_norm: the residual add and the LayerNorm in one op with one autograd node, in one
// kernel where the device has it (CUDA), else the add's and layer_norm's kernels; the normalised
// output written in the autocast region's dtype inside a region. Its backward runs layer_norm's
// backward kernel and adds the residual stream's own gradient.
#include "framework/ops/norm_fused_kernels.h"

#include "framework/autocast_state.h"
#include "framework/op.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/norm_kernels.h"

namespace hg {

HG_DEFINE_OPTIONAL_STUB(add_layer_norm_stub, AddLayerNormFn);

namespace {
// Not double-differentiable: its backward calls layer_norm's backward kernel directly.
const OpDef kAddLayerNorm{"add_layer_norm", true, false};

void check_affine(const char* what, const Tensor& p, const Tensor& sum, const Shape& shape) {
  if (!p.defined()) return;
  constexpr const char* op = "add_layer_norm";
  HG_CHECK(p.device() == sum.device(), op, "{} is on {} but the input is on {}", what, p.device(), sum.device());
  HG_CHECK(p.shape() == shape, op, "{} must have shape {} (normalized_shape), got {}", what, shape, p.shape());
  HG_CHECK(p.dtype() == sum.dtype() || p.dtype() == kFloat32, op,
           "{} has dtype {}, expected the sum's dtype {} or float32", what, p.dtype(), sum.dtype());
}
}  // namespace

AddLayerNorm add_layer_norm(const Tensor& x_in, const Tensor& r_in, const Shape& normalized_shape, const Tensor& w_in,
                            const Tensor& b_in, double eps) {
  constexpr const char* op = "add_layer_norm";
  OpCall call(kAddLayerNorm, {x_in, r_in, w_in, b_in});
  const Tensor& x = call.input(0);
  const Tensor& r = call.input(1);
  const Tensor& weight = call.input(2);
  const Tensor& bias = call.input(3);
  HG_CHECK(x.defined() && r.defined(), op, "got an undefined input or residual");
  HG_CHECK(is_floating(x.dtype()) && is_floating(r.dtype()), op,
           "expected floating-point input and residual, got {} and {}", x.dtype(), r.dtype());
  HG_CHECK(x.device() == r.device(), op, "input and residual are on different devices: {} and {}", x.device(),
           r.device());
  HG_CHECK(x.shape() == r.shape(), op, "input and residual must have one shape (no broadcasting), got {} and {}",
           x.shape(), r.shape());
  const auto k = static_cast<int64_t>(normalized_shape.size());
  HG_CHECK(k >= 1, op, "normalized_shape must have at least one dim, got {}", normalized_shape);
  HG_CHECK(x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape, op,
           "input shape {} does not end with normalized_shape {}", x.shape(), normalized_shape);
  const Dtype dtype = promote_types(x.dtype(), r.dtype());
  const Device device = x.device();
  const DeviceType dev = device.type;
  Tensor sum = empty(x.shape(), TensorOptions(dtype).device(device));
  check_affine("weight", weight, sum, normalized_shape);
  check_affine("bias", bias, sum, normalized_shape);

  const int64_t cols = numel_of(normalized_shape), rows = cols ? sum.numel() / cols : 0;
  const Tensor w = weight.defined() ? internal::contiguous(weight) : weight;
  const Tensor b = bias.defined() ? internal::contiguous(bias) : bias;
  const TensorOptions sopt = TensorOptions(dtype == kFloat64 ? kFloat64 : kFloat32).device(device);
  Tensor mean = empty({rows}, sopt), rstd = empty({rows}, sopt);
  // Inside a region the next op (a linear) would cast the float32 output to the region's dtype.
  const AutocastDeviceState& region = autocast_state()[dev];
  const bool lower = region.enabled && OpCall::depth() == 1 && dtype == kFloat32 && region.dtype != dtype;
  const Dtype out_dtype = lower ? region.dtype : dtype;
  const bool float32_params = (!w.defined() || w.dtype() == kFloat32) && (!b.defined() || b.dtype() == kFloat32);
  Tensor normalized;
  if (add_layer_norm_stub.has(dev) && dtype == kFloat32 && r.dtype() == kFloat32 && float32_params) {
    // One kernel writes the sum and its normalised row.
    normalized = empty(x.shape(), TensorOptions(out_dtype).device(device));
    if (normalized.numel())
      add_layer_norm_stub(dev, sum, normalized, mean, rstd, internal::contiguous(x), internal::contiguous(r), w, b,
                          eps);
  } else {
    if (sum.numel())
      binary_stub(dev, BinaryOp::Add, sum, x.dtype() == dtype ? x : internal::dense_as(x, dtype, x.shape()),
                  r.dtype() == dtype ? r : internal::dense_as(r, dtype, r.shape()), 1.0);
    normalized = empty(x.shape(), TensorOptions(dtype).device(device));
    if (normalized.numel()) layer_norm_stub(dev, normalized, mean, rstd, sum, w, b, eps);
    if (lower) {
      Tensor low = empty(x.shape(), TensorOptions(out_dtype).device(device));
      if (low.numel()) copy_stub(dev, low, normalized);
      normalized = low;
    }
  }

  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ssum = SavedTensor::output(sum, op, 0), w, mean, rstd, need_x = x.requires_grad(), need_r = r.requires_grad(),
          need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(),
          x_dtype = x.dtype(), r_dtype = r.dtype(), bias_dtype = bias.defined() ? bias.dtype() : kFloat32,
          normalized_shape](const TensorList& g) -> TensorList {
      const Tensor sum = ssum.get();  // checks it was not written in place since the forward
      const Device device = sum.device();
      const TensorOptions opt = TensorOptions(sum.dtype()).device(device);
      Tensor total, gw, gb;
      if (g[1].defined()) {
        const Tensor go = internal::dense_as(g[1], sum.dtype(), sum.shape());
        total = empty(sum.shape(), opt);
        gw = need_w ? empty(w.shape(), TensorOptions(w.dtype()).device(device)) : Tensor();
        gb = need_b ? empty(normalized_shape, TensorOptions(bias_dtype).device(device)) : Tensor();
        if (sum.numel()) layer_norm_backward_stub(device.type, total, gw, gb, go, sum, mean, rstd, w);
        if (g[0].defined() && sum.numel())
          binary_stub(device.type, BinaryOp::Add, total, total, internal::dense_as(g[0], sum.dtype(), sum.shape()),
                      1.0);
      } else if (g[0].defined()) {
        total = internal::dense_as(g[0], sum.dtype(), sum.shape());
      }
      if (!total.defined()) return {Tensor(), Tensor(), gw, gb};
      auto as = [&](Dtype d) {
        if (d == total.dtype()) return total;
        Tensor t = empty(total.shape(), TensorOptions(d).device(device));
        if (t.numel()) copy_stub(device.type, t, total);
        return t;
      };
      return {need_x ? as(x_dtype) : Tensor(), need_r ? as(r_dtype) : Tensor(), gw, gb};
    };
  }
  call.finish({&sum, &normalized}, std::move(bw));
  return {sum, normalized};
}

}  // namespace hg
