// layer_norm and batch_norm: argument checks and backward formulas; the fused kernels live in
// kernels/cpu/norm.cpp.
#include "framework/ops/norm_kernels.h"

#include "framework/autocast_state.h"
#include "framework/grad_mode.h"
#include "framework/memory_overlap.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/unary.h"
#include "framework/ops/unary_kernels.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(layer_norm_stub, LayerNormFn);
HG_DEFINE_STUB(layer_norm_backward_stub, LayerNormBackwardFn);
HG_DEFINE_STUB(batch_norm_stub, BatchNormFn);
HG_DEFINE_STUB(batch_norm_backward_stub, BatchNormBackwardFn);
HG_DEFINE_OPTIONAL_STUB(batch_norm_add_relu_stub, BatchNormAddReluFn);

bool batch_norm_channels_last_in_kernel(DeviceType dev) { return dev == kCUDA || dev == kCPU; }

namespace {
const OpDef kLayerNorm{"layer_norm", true};
const OpDef kLayerNormBackward{"layer_norm_backward", false};
const OpDef kBatchNorm{"batch_norm", true};
const OpDef kBatchNormBackward{"batch_norm_backward", false};
// relu(batch_norm(x) + residual) as one op: the add and the ReLU in the normalising pass where
// the device has batch_norm_add_relu_stub (CUDA).
const OpDef kBatchNormAddRelu{"batch_norm_add_relu", true};

Tensor contiguous_detached(const Tensor& t) { return t.defined() ? internal::contiguous(t) : t; }

Dtype stats_dtype(Dtype x) { return x == kFloat64 ? kFloat64 : kFloat32; }

// A per-feature parameter (weight, bias, running stat): optional, of `shape`, on x's device,
// floating and either x's dtype or float32 (the usual master-weight layout for 16-bit x).
void check_param(const char* op, const char* what, const Tensor& p, const Tensor& x, const Shape& shape) {
  if (!p.defined()) return;
  HG_CHECK(p.device() == x.device(), op, "{} is on {} but the input is on {}", what, p.device(), x.device());
  HG_CHECK(p.shape() == shape, op, "{} must have shape {} for input shape {}, got {}", what, shape, x.shape(),
           p.shape());
  HG_CHECK(p.dtype() == x.dtype() || p.dtype() == kFloat32, op,
           "{} has dtype {}, expected the input's dtype {} or float32", what, p.dtype(), x.dtype());
}

// The gradient arriving for the output, contiguous and of x's dtype, with x's shape.
Tensor empty_as(const Tensor& t) {
  return empty(t.shape(), TensorOptions(t.dtype()).device(t.device()), t.suggest_memory_format());
}

// Under create_graph (grad mode on in the formula): a normalization's gradients written in public
// ops, so they can be differentiated again. x is normalized over `dims`, with statistics recomputed
// from x, or fixed (batch_norm in eval mode: `fixed_mean`/`fixed_invstd` are constants); the
// affine weight is viewed as `param_view` to broadcast, and its gradients sum over `param_dims`.
struct NormGrads {
  Tensor gx, gw, gb;
};
NormGrads norm_grads_recorded(const Tensor& x, const Tensor& w, const Tensor& g, const std::vector<int64_t>& dims,
                              const Shape& param_view, const std::vector<int64_t>& param_dims, double eps,
                              const Tensor& fixed_mean, const Tensor& fixed_invstd, bool need_x, bool need_w,
                              bool need_b, Dtype bias_dtype) {
  const Dtype compute = stats_dtype(x.dtype());
  const Tensor xc = x.to(compute), gc = g.reshape(x.shape()).to(compute);
  const bool fixed = fixed_mean.defined();
  Tensor mu, rstd;
  if (fixed) {
    mu = fixed_mean.reshape(param_view);
    rstd = fixed_invstd.reshape(param_view);
  } else {
    mu = mean(xc, dims, true);
    const Tensor centered = xc - mu;
    rstd = rsqrt(mean(centered * centered, dims, true) + eps);
  }
  const Tensor xhat = (xc - mu) * rstd;
  const Tensor gxhat = w.defined() ? gc * w.to(compute).reshape(param_view) : gc;
  auto param_sum = [&](const Tensor& t) { return param_dims.empty() ? t : sum(t, param_dims); };
  NormGrads r;
  if (need_x) {
    const Tensor gx =
        fixed ? gxhat * rstd : rstd * (gxhat - mean(gxhat, dims, true) - xhat * mean(gxhat * xhat, dims, true));
    r.gx = gx.to(x.dtype());
  }
  if (need_w) r.gw = param_sum(gc * xhat).reshape(w.shape()).to(w.dtype());
  if (need_b) r.gb = param_sum(gc).reshape(w.defined() ? w.shape() : Shape{param_sum(gc).numel()}).to(bias_dtype);
  return r;
}
}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& w_in, const Tensor& b_in,
                  double eps) {
  OpCall call(kLayerNorm, {x_in, w_in, b_in});
  const Tensor& input = call.input(0);
  const Tensor& weight = call.input(1);
  const Tensor& bias = call.input(2);
  HG_CHECK(input.defined(), "layer_norm", "got an undefined input");
  HG_CHECK(is_floating(input.dtype()), "layer_norm", "expected a floating-point input, got {}", input.dtype());
  const auto k = static_cast<int64_t>(normalized_shape.size());
  HG_CHECK(k >= 1, "layer_norm", "normalized_shape must have at least one dim, got {}", normalized_shape);
  HG_CHECK(input.dim() >= k && Shape(input.shape().end() - k, input.shape().end()) == normalized_shape, "layer_norm",
           "input shape {} does not end with normalized_shape {}", input.shape(), normalized_shape);
  check_param("layer_norm", "weight", weight, input, normalized_shape);
  check_param("layer_norm", "bias", bias, input, normalized_shape);
  const int64_t cols = numel_of(normalized_shape), rows = cols ? input.numel() / cols : 0;
  const Tensor x = contiguous_detached(input), w = contiguous_detached(weight), b = contiguous_detached(bias);
  const TensorOptions sopt = TensorOptions(stats_dtype(x.dtype())).device(x.device());
  Tensor out = empty_as(x), mean = empty({rows}, sopt), rstd = empty({rows}, sopt);
  if (out.numel()) layer_norm_stub(x.device().type, out, mean, rstd, x, w, b, eps);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, "layer_norm"), sw = SavedTensor(w, "layer_norm"), si = SavedTensor(input, "layer_norm"),
          swi = SavedTensor(weight, "layer_norm"), mean, rstd, need_x = input.requires_grad(),
          need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(),
          bias_dtype = bias.defined() ? bias.dtype() : kFloat32, normalized_shape,
          eps](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
      if (GradMode::is_enabled()) {
        const Tensor x = si.get();
        const auto k = static_cast<int64_t>(normalized_shape.size());
        std::vector<int64_t> dims, lead;
        for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? lead : dims).push_back(d);
        NormGrads r = norm_grads_recorded(x, swi.get(), g[0], dims, normalized_shape, lead, eps, Tensor(), Tensor(),
                                          need_x, need_w, need_b, bias_dtype);
        if (r.gb.defined()) r.gb = r.gb.reshape(normalized_shape);
        return {r.gx, r.gw, r.gb};
      }
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      OpCall bcall(kLayerNormBackward, {g[0], x, w});
      // The gradient in x's layout (channels-last where the kernel takes NHWC, else contiguous).
      const Tensor go = x.is_contiguous()
                            ? internal::dense_as(bcall.input(0), x.dtype(), x.shape())
                            : internal::laid_out(internal::cast(bcall.input(0), x.dtype()), MemoryFormat::ChannelsLast);
      Tensor gx = need_x ? empty_as(x) : Tensor();
      Tensor gw = need_w ? empty_as(w) : Tensor();
      Tensor gb = need_b ? empty(normalized_shape, TensorOptions(bias_dtype).device(x.device())) : Tensor();
      layer_norm_backward_stub(x.device().type, gx, gw, gb, go, x, mean, rstd, w);
      bcall.finish({&gx, &gw, &gb});
      return {gx, gw, gb};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

namespace {
// batch_norm, and with `relu` batch_norm_add_relu: relu(batch_norm(x) + residual), residual
// optional. One argument check, one forward, one backward.
Tensor batch_norm_op(const OpDef& def, bool relu, const Tensor& x_in, const Tensor& running_mean,
                     const Tensor& running_var, const Tensor& w_in, const Tensor& b_in, const Tensor& r_in,
                     bool training, double momentum, double eps) {
  OpCall call(def, {x_in, w_in, b_in, r_in});
  const Tensor& input = call.input(0);
  const Tensor& weight = call.input(1);
  const Tensor& bias = call.input(2);
  const Tensor& residual = call.input(3);
  HG_CHECK(!residual.defined() || (input.defined() && residual.shape() == input.shape() &&
                                   residual.dtype() == input.dtype() && residual.device() == input.device()),
           def.name, "the residual must have the input's shape {}, dtype {} and device, got {} {} on {}",
           input.defined() ? input.shape() : Shape{}, input.defined() ? dtype_name(input.dtype()) : "none",
           residual.defined() ? residual.shape() : Shape{}, residual.defined() ? dtype_name(residual.dtype()) : "none",
           residual.defined() ? residual.device() : Device(kCPU));
  HG_CHECK(input.defined(), def.name, "got an undefined input");
  HG_CHECK(is_floating(input.dtype()), def.name, "expected a floating-point input, got {}", input.dtype());
  HG_CHECK(input.dim() >= 2, def.name, "expected an input [N, C, ...] with at least 2 dims, got shape {}",
           input.shape());
  const int64_t n = input.size(0), c = input.size(1), s = c && n ? input.numel() / (n * c) : 0;
  const Shape cshape{c};
  check_param(def.name, "weight", weight, input, cshape);
  check_param(def.name, "bias", bias, input, cshape);
  check_param(def.name, "running_mean", running_mean, input, cshape);
  check_param(def.name, "running_var", running_var, input, cshape);
  HG_CHECK(running_mean.defined() == running_var.defined(), "batch_norm",
           "running_mean and running_var must both be given or both be omitted");
  HG_CHECK(training || running_mean.defined(), "batch_norm",
           "running_mean and running_var are needed in eval mode (training=false), input shape {}", input.shape());
  HG_CHECK(!training || n * s > 1, "batch_norm",
           "expected more than 1 value per channel when training, got input shape {}", input.shape());
  HG_CHECK(!running_mean.defined() || (!running_mean.requires_grad() && !running_var.requires_grad()), "batch_norm",
           "running_mean and running_var are updated in place and must not require grad");
  if (training && running_mean.defined()) {
    // The stats are written in place while the input is read: none may share memory.
    for (const Tensor* stat : {&running_mean, &running_var}) {
      assert_no_internal_overlap(*stat, def.name);
      for (const Tensor* other : {&input, &weight, &bias}) assert_no_overlap(*stat, *other, def.name);
    }
    assert_no_overlap(running_mean, running_var, def.name);
  }
  // A channels-last input gives a channels-last output (and input gradient). A backend whose
  // kernels reduce over NHWC itself gets it as it is; the others run on an NCHW copy, so both
  // layouts give the same values there.
  const bool channels_last = internal::output_format(input.shape(), {&input}) == MemoryFormat::ChannelsLast;
  const bool native = channels_last && batch_norm_channels_last_in_kernel(input.device().type);
  const Tensor x = native ? internal::laid_out(input, MemoryFormat::ChannelsLast) : contiguous_detached(input);
  const Tensor w = contiguous_detached(weight), b = contiguous_detached(bias);
  // The kernel updates contiguous running stats in place; other layouts go through a copy.
  Tensor rm = running_mean, rv = running_var;
  const bool update = training && rm.defined();
  if (rm.defined() && !(rm.is_contiguous() && rv.is_contiguous())) rm = rm.contiguous(), rv = rv.contiguous();
  const TensorOptions sopt = TensorOptions(stats_dtype(x.dtype())).device(x.device());
  Tensor out = empty_as(x), save_mean = empty({c}, sopt), save_invstd = empty({c}, sopt);
  const DeviceType dev = x.device().type;
  // The residual in the layout the kernels write out in.
  const Tensor r = residual.defined()
                       ? internal::laid_out(residual, native ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous)
                       : Tensor();
  if (c > 0 && relu && batch_norm_add_relu_stub.has(dev)) {
    batch_norm_add_relu_stub(dev, out, save_mean, save_invstd, x, w, b, rm, rv, training, momentum, eps, r);
  } else if (c > 0) {
    // Without the fused kernel (the CPU reference): the batch_norm, add and relu kernels in turn,
    // the three public ops' values.
    batch_norm_stub(dev, out, save_mean, save_invstd, x, w, b, rm, rv, training, momentum, eps);
    if (r.defined() && out.numel()) binary_stub(dev, BinaryOp::Add, out, out, r, 1.0);
    if (relu && out.numel()) unary_stub(dev, UnaryOp::Relu, out, out, 0, 0);
  }
  if (channels_last) out = internal::laid_out(out, MemoryFormat::ChannelsLast);
  if (update) {
    if (rm.is_same(running_mean)) {
      running_mean.bump_version();
      running_var.bump_version();
    } else {
      NoGradGuard ng;
      Tensor(running_mean).copy_(rm);
      Tensor(running_var).copy_(rv);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, def.name), sw = SavedTensor(w, def.name), si = SavedTensor(input, def.name),
          swi = SavedTensor(weight, def.name), save_mean, save_invstd, training, eps, channels_last, relu,
          sy = relu ? SavedTensor::output(out, def.name) : SavedTensor(),
          need_r = residual.defined() && residual.requires_grad(), need_x = input.requires_grad(),
          need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(),
          bias_dtype = bias.defined() ? bias.dtype() : kFloat32](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor(), Tensor(), Tensor(), Tensor()};
      // Through the ReLU first (its mask from the saved output); the residual's gradient is that.
      const Tensor go_bn = relu ? relu_gradient(g[0], sy.get()) : g[0];
      const Tensor gr = need_r ? go_bn : Tensor();
      if (GradMode::is_enabled()) {
        const Tensor x = si.get();
        std::vector<int64_t> dims{0};
        Shape view(static_cast<size_t>(x.dim()), 1);
        view[1] = x.size(1);
        for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
        NormGrads r = norm_grads_recorded(x, swi.get(), go_bn, dims, view, dims, eps, training ? Tensor() : save_mean,
                                          training ? Tensor() : save_invstd, need_x, need_w, need_b, bias_dtype);
        return {r.gx, r.gw, r.gb, gr};
      }
      const Tensor& x = sx.get();
      const Tensor& w = sw.get();
      OpCall bcall(kBatchNormBackward, {go_bn, x, w});
      // The gradient in x's layout (channels-last where the kernel takes NHWC, else contiguous).
      const Tensor go = x.is_contiguous()
                            ? internal::dense_as(bcall.input(0), x.dtype(), x.shape())
                            : internal::laid_out(internal::cast(bcall.input(0), x.dtype()), MemoryFormat::ChannelsLast);
      Tensor gx = need_x ? empty_as(x) : Tensor();
      Tensor gw = need_w ? empty_as(w) : Tensor();
      Tensor gb = need_b ? empty({x.size(1)}, TensorOptions(bias_dtype).device(x.device())) : Tensor();
      if (x.size(1) > 0)
        batch_norm_backward_stub(x.device().type, gx, gw, gb, go, x, w, save_mean, save_invstd, training);
      if (channels_last && gx.defined()) gx = internal::laid_out(gx, MemoryFormat::ChannelsLast);
      bcall.finish({&gx, &gw, &gb});
      return {gx, gw, gb, gr};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return batch_norm_op(kBatchNorm, false, x, running_mean, running_var, weight, bias, Tensor(), training, momentum,
                       eps);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                           const Tensor& bias, const Tensor& residual, bool training, double momentum, double eps) {
  return batch_norm_op(kBatchNormAddRelu, true, x, running_mean, running_var, weight, bias, residual, training,
                       momentum, eps);
}

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  HG_CHECK(x_in.defined(), "group_norm", "got an undefined input");
  HG_CHECK(x_in.dim() >= 2, "group_norm", "expected an input [N, C, ...] with at least 2 dims, got shape {}",
           x_in.shape());
  HG_CHECK(is_floating(x_in.dtype()), "group_norm", "expected a floating-point input, got {}", x_in.dtype());
  const int64_t n = x_in.size(0), c = x_in.size(1);
  HG_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm",
           "num_channels {} (dim 1 of shape {}) must be divisible by num_groups {}", c, x_in.shape(), num_groups);
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    const char* what = t == &weight ? "weight" : "bias";
    HG_CHECK(t->shape() == Shape{c}, "group_norm", "{} must have shape [{}] (one per channel), got {}", what, c,
             t->shape());
    HG_CHECK(t->device() == x_in.device(), "group_norm", "{} is on {} but the input is on {}", what, t->device(),
             x_in.device());
  }
  // PyTorch's autocast runs group_norm in float32 (the statistics need it): at the outermost op,
  // cast here, since the composed ops below would otherwise each follow their own rows.
  const bool autocast = OpCall::depth() == 0 && autocast_state()[x_in.device().type].enabled;
  auto prep = [&](const Tensor& t) { return autocast && t.defined() && t.dtype() != kFloat32 ? t.to(kFloat32) : t; };
  const Tensor x = prep(x_in);
  const int64_t per_group = n * c == 0 ? 0 : x.numel() / (n * num_groups);
  Tensor y = layer_norm(x.reshape({n, num_groups, per_group}), {per_group}, Tensor(), Tensor(), eps).reshape(x.shape());
  Shape affine(static_cast<size_t>(x.dim()), 1);
  affine[1] = c;
  if (weight.defined()) y = y * prep(weight).reshape(affine);
  if (bias.defined()) y = y + prep(bias).reshape(affine);
  return y;
}

}  // namespace hg
