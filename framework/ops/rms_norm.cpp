// rms_norm: one fused kernel forward (the rows' 1/rms saved); the backward in public ops, so it
// runs on every backend and differentiates again (under create_graph the statistics are
// recomputed from x, so their own dependence on x is recorded too).
#include "framework/ops/rms_norm_kernels.h"

#include <limits>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/unary.h"

namespace hg {

HG_DEFINE_STUB(rms_norm_stub, RmsNormFn);

namespace {
const OpDef kRmsNorm{"rms_norm", true};
}  // namespace

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& w_in, std::optional<double> eps_in) {
  OpCall call(kRmsNorm, {x_in, w_in});
  const Tensor& input = call.input(0);
  const Tensor& weight = call.input(1);
  const char* name = kRmsNorm.name;
  HG_CHECK(input.defined(), name, "got an undefined input");
  HG_CHECK(is_floating(input.dtype()), name, "expected a floating-point input, got {}", input.dtype());
  const auto k = static_cast<int64_t>(normalized_shape.size());
  HG_CHECK(k >= 1, name, "normalized_shape must have at least one dim, got {}", normalized_shape);
  HG_CHECK(input.dim() >= k && Shape(input.shape().end() - k, input.shape().end()) == normalized_shape, name,
           "input shape {} does not end with normalized_shape {}", input.shape(), normalized_shape);
  if (weight.defined()) {
    HG_CHECK(weight.device() == input.device(), name, "weight is on {} but the input is on {}", weight.device(),
             input.device());
    HG_CHECK(weight.shape() == normalized_shape, name, "weight must have shape {}, got {}", normalized_shape,
             weight.shape());
    HG_CHECK(weight.dtype() == input.dtype() || weight.dtype() == kFloat32, name,
             "weight has dtype {}, expected the input's dtype {} or float32", weight.dtype(), input.dtype());
  }
  const Dtype compute = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const double eps = eps_in.value_or(compute == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                         : static_cast<double>(std::numeric_limits<float>::epsilon()));
  HG_CHECK(eps >= 0, name, "eps must be non-negative, got {}", eps);
  const int64_t cols = numel_of(normalized_shape), rows = cols ? input.numel() / cols : 0;
  const Tensor x = internal::contiguous(input);
  const Tensor w = weight.defined() ? internal::contiguous(weight) : weight;
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  Tensor rstd = empty({rows}, TensorOptions(compute).device(x.device()));
  if (out.numel())
    rms_norm_stub(x.device().type, internal::alias_contiguous(out, {rows, cols}), rstd,
                  internal::alias_contiguous(x, {rows, cols}), w, eps);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(input, name), sw = SavedTensor(weight, name), rstd, k, eps, compute,
          need_x = input.requires_grad(),
          need_w = weight.defined() && weight.requires_grad()](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor(), Tensor()};
      const Tensor x = sx.get(), w = sw.get();
      std::vector<int64_t> dims, lead;
      for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? lead : dims).push_back(d);
      Shape stat_shape(x.shape().begin(), x.shape().end() - k);
      stat_shape.resize(static_cast<size_t>(x.dim()), 1);
      const Tensor xc = x.to(compute), gc = g[0].to(compute);
      // r = 1/rms: the saved one, or (recorded) recomputed so that its dependence on x is differentiated.
      const Tensor r = GradMode::is_enabled() ? rsqrt(mean(xc * xc, dims, true) + eps) : rstd.reshape(stat_shape);
      const Tensor xhat = xc * r;
      const Tensor gxhat = w.defined() ? gc * w.to(compute) : gc;
      // d/dx of x r w: r (gxhat - xhat mean(gxhat xhat)).
      Tensor gx;
      if (need_x) gx = (r * (gxhat - xhat * mean(gxhat * xhat, dims, true))).to(x.dtype());
      Tensor gw;
      if (need_w) gw = (lead.empty() ? gc * xhat : sum(gc * xhat, lead)).to(w.dtype());
      return {gx, gw};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
