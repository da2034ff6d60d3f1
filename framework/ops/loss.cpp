// Classification losses: cross_entropy (one fused kernel each way) and nll_loss, plus the
// reduction every loss shares.
#include "framework/ops/loss_kernels.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/categorical.h"
#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/reduce_kernels.h"
#include "framework/ops/softmax.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(cross_entropy_stub, CrossEntropyFn);
HG_DEFINE_STUB(cross_entropy_backward_stub, CrossEntropyBackwardFn);
HG_DEFINE_STUB(nll_stub, NllFn);
HG_DEFINE_STUB(nll_backward_stub, NllBackwardFn);

namespace detail {
Tensor reduce_loss(const Tensor& losses, Reduction reduction, int64_t count, Dtype out_dtype) {
  const Tensor n = scalar_tensor(static_cast<double>(count), TensorOptions(losses.dtype()).device(losses.device()));
  return reduce_loss(losses, reduction, n, out_dtype);
}

Tensor reduce_loss(const Tensor& losses, Reduction reduction, const Tensor& count, Dtype out_dtype) {
  const Device dev = losses.device();
  Tensor r = losses;
  if (reduction != Reduction::None) {
    r = empty({}, TensorOptions(losses.dtype()).device(dev));
    if (losses.numel() == 0) {
      fill_stub(dev.type, r, 0.0);
    } else {
      const Tensor flat = internal::alias(losses, {1, losses.numel()}, {losses.numel(), 1}, losses.offset());
      reduce_stub(dev.type, ReduceOp::Sum, internal::alias(r, {1}, {1}, 0), flat);
    }
    if (reduction == Reduction::Mean)  // 0 / 0 gives NaN when every target is ignored, as PyTorch
      binary_stub(dev.type, BinaryOp::Div, r, r, count, 1.0);
  }
  if (r.dtype() == out_dtype) return r;
  Tensor out = empty(r.shape(), TensorOptions(out_dtype).device(dev));
  if (out.numel()) copy_stub(dev.type, out, r);
  return out;
}
}  // namespace detail

namespace {
const OpDef kCrossEntropy{"cross_entropy", true};
const OpDef kNllLoss{"nll_loss", true};
const OpDef kCrossEntropyBackward{"cross_entropy_backward", false};
const OpDef kNllLossBackward{"nll_loss_backward", false};

// The [N, C, S] / [N, S] views of (input, target) shared by cross_entropy and nll_loss.
struct ClassLayout {
  Tensor input, target;  // contiguous, [N, C, S] and [N, S]
};
ClassLayout class_layout(std::string_view op, const Tensor& x, const Tensor& target) {
  HG_CHECK(x.defined() && target.defined(), op, "got an undefined tensor");
  HG_CHECK(x.device() == target.device(), op, "input and target are on different devices: {} and {}", x.device(),
           target.device());
  HG_CHECK(is_floating(x.dtype()), op, "expected a floating-point input, got {} (shape {})", x.dtype(), x.shape());
  // Integer indices of another width are indices all the same: a cast is the fix. A floating
  // target is not one (cross_entropy takes it as probabilities before getting here).
  HG_CHECK(target.dtype() == kInt64 || is_floating(target.dtype()), op,
           "expected target to hold int64 class indices, got {} (shape {}); convert it with to(hg::kInt64)",
           target.dtype(), target.shape());
  HG_CHECK(target.dtype() == kInt64, op, "expected target to hold int64 class indices, got {} (shape {})",
           target.dtype(), target.shape());
  HG_CHECK(x.dim() >= 1, op, "expected an input of shape [N, C, ...] or [C], got a 0-d tensor");
  Shape want;  // the target shape the input implies
  int64_t n = 1, c = 0, s = 1;
  if (x.dim() == 1) {
    c = x.shape()[0];
  } else {
    n = x.shape()[0];
    c = x.shape()[1];
    want.push_back(n);
    for (int64_t d = 2; d < x.dim(); ++d) {
      want.push_back(x.shape()[static_cast<size_t>(d)]);
      s *= x.shape()[static_cast<size_t>(d)];
    }
  }
  HG_CHECK(target.shape() == want, op, "expected target of shape {} for input of shape {}, got target shape {}", want,
           x.shape(), target.shape());
  const Tensor xc = internal::contiguous(x), tc = internal::contiguous(target);
  return {internal::alias(xc, {n, c, s}, {c * s, s, 1}, xc.offset()), internal::alias(tc, {n, s}, {s, 1}, tc.offset())};
}

// The kept-target count (0-d int64) in the compute dtype, converted on its device (no host wait).
Tensor count_as(const Tensor& kept, Dtype compute) {
  Tensor c = empty({}, TensorOptions(compute).device(kept.device()));
  copy_stub(kept.device().type, c, kept);
  return c;
}

// The per-sample weight of the upstream gradient: [N, S] for None, 0-d otherwise (divided by
// the non-ignored count for Mean), in the compute dtype.
// `count` is the 0-d device tensor the forward wrote.
Tensor grad_weight(const Tensor& g, Reduction reduction, const Tensor& count, Dtype compute, int64_t n, int64_t s) {
  Tensor w = g.dtype() == compute ? g : g.to(compute);
  if (reduction == Reduction::None) return contiguous(w).reshape({n, s});
  if (reduction == Reduction::Mean) w = w / count;
  return w;
}
// Under create_graph (grad mode on in the formula): the input gradient, of x_shape, of
// cross_entropy (given its logits) or nll_loss (logits undefined) written in public ops, so it can be differentiated
// again: (softmax(x) - q) * w or -q * w, with q the target's one-hot row (smoothed by
// label_smoothing) and w the upstream gradient per kept target (0 where ignored, divided by the
// kept count for Mean).
Tensor class_loss_grad_recorded(const Tensor& logits, const Shape& x_shape, Dtype x_dtype, const Tensor& target,
                                const Tensor& g, Reduction reduction, const Tensor& count, int64_t ignore_index,
                                double label_smoothing, Dtype compute) {
  const int64_t n = target.shape()[0], s = target.shape()[1];
  const int64_t c = x_shape.size() == 1 ? x_shape[0] : x_shape[1];
  const Tensor keep = ne(target, full_like(target, static_cast<double>(ignore_index)));
  const Tensor safe_target = where(keep, target, zeros_like(target));
  Tensor q = one_hot(safe_target, c).to(compute).permute({0, 2, 1});  // [N, C, S]
  if (label_smoothing > 0) q = q * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(c);
  Tensor w = g.to(compute);
  w = reduction == Reduction::None ? w.reshape({n, 1, s}) : w;
  if (reduction == Reduction::Mean) w = w / count;
  w = w * keep.to(compute).unsqueeze(1);
  const Tensor gx = logits.defined() ? (softmax(logits.to(compute).reshape({n, c, s}), 1) - q) * w : -(q * w);
  return gx.reshape(x_shape).to(x_dtype);
}

// cross_entropy with class probabilities q of the logits' shape (soft labels), as PyTorch:
// -sum_c q'_c log_softmax(x)_c per sample with q' = q (1 - s) + s / C. Built on log_softmax's
// fused kernels (every backend), with both gradients in public ops (so they differentiate again):
// x: (softmax(x) sum_c q' - q') w, q: -(1 - s) log_softmax(x) w, w the upstream gradient per sample.
Tensor cross_entropy_probs(OpCall& call, Reduction reduction, double smoothing) {
  const Tensor& x = call.input(0);
  const Tensor& target = call.input(1);
  HG_CHECK(x.device() == target.device(), "cross_entropy", "input and target are on different devices: {} and {}",
           x.device(), target.device());
  HG_CHECK(is_floating(x.dtype()), "cross_entropy", "expected a floating-point input, got {} (shape {})", x.dtype(),
           x.shape());
  HG_CHECK(x.dim() >= 1, "cross_entropy", "expected an input of shape [N, C, ...] or [C], got a 0-d tensor");
  HG_CHECK(target.shape() == x.shape(), "cross_entropy",
           "a {} target holds class probabilities and must have the input's shape {}, got shape {} (class indices "
           "are int64)",
           target.dtype(), x.shape(), target.shape());
  const int64_t cdim = x.dim() == 1 ? 0 : 1, c = x.shape()[static_cast<size_t>(cdim)];
  const Dtype compute = detail::loss_compute_dtype(x.dtype());
  // q' from q (a public-op composition, so the formulas below can record it under create_graph).
  auto smoothed = [smoothing, c, compute](const Tensor& q) {
    const Tensor qc = q.to(compute);
    return smoothing > 0 ? qc * (1.0 - smoothing) + smoothing / static_cast<double>(c) : qc;
  };
  Tensor losses;
  {
    NoGradGuard no_grad;
    losses = neg(sum(log_softmax(x.to(compute), cdim) * smoothed(target), {cdim}));
  }
  const int64_t count = losses.numel();
  Tensor out =
      detail::reduce_loss(internal::contiguous(losses), reduction, count, call.output_dtype().value_or(x.dtype()));
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, "cross_entropy"), st = SavedTensor(target, "cross_entropy"), smoothed, reduction, count,
          cdim, compute, smoothing, need_x = x.requires_grad(),
          need_t = target.requires_grad()](const TensorList& g) -> TensorList {
      const Tensor x = sx.get(), t = st.get();
      Tensor w = g[0].to(compute);
      if (reduction == Reduction::None) w = w.unsqueeze(cdim);
      if (reduction == Reduction::Mean) w = w / static_cast<double>(count);
      const Tensor lsm = log_softmax(x.to(compute), cdim);
      Tensor gx, gt;
      if (need_x) {
        const Tensor q = smoothed(t);
        gx = ((exp(lsm) * sum(q, {cdim}, true) - q) * w).to(x.dtype());
      }
      if (need_t) gt = (lsm * (-(1.0 - smoothing)) * w).to(t.dtype());
      return {gx, gt};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  OpCall call(kCrossEntropy, {logits, target});
  const Tensor& x = call.input(0);
  HG_CHECK(reduction != Reduction::BatchMean, "cross_entropy", "Reduction::BatchMean is for kl_div only");
  HG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy",
           "label_smoothing must be in [0, 1], got {}", label_smoothing);
  HG_CHECK(x.defined() && call.input(1).defined(), "cross_entropy", "got an undefined tensor");
  if (is_floating(call.input(1).dtype())) return cross_entropy_probs(call, reduction, label_smoothing);
  ClassLayout l = class_layout("cross_entropy", x, call.input(1));
  const int64_t n = l.input.shape()[0], s = l.input.shape()[2];
  const Dtype compute = detail::loss_compute_dtype(x.dtype());
  Tensor losses = empty(call.input(1).shape(), TensorOptions(compute).device(x.device()));
  Tensor lse = empty({n, s}, TensorOptions(compute).device(x.device()));
  const Tensor kept = zeros({}, TensorOptions(kInt64).device(x.device()));
  if (n * s > 0)
    cross_entropy_stub(x.device().type, internal::alias(losses, {n, s}, {s, 1}, 0), lse, kept, l.input, l.target,
                       ignore_index, label_smoothing);
  const Tensor count = count_as(kept, compute);
  // CUDA autocast's row is "fp32 with output dtype": 16-bit logits are read as they are (the
  // kernels convert each element exactly and compute in float32, so the loss and the gradient,
  // rounded once into the logits' dtype, are those of a float32 copy) and the loss is float32.
  Tensor out = detail::reduce_loss(losses, reduction, count, call.output_dtype().value_or(x.dtype()));
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [l, sx = SavedTensor(x, "cross_entropy"), lse, reduction, count, ignore_index, label_smoothing, compute, n,
          s](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();  // checks x was not modified in place since the forward
      if (GradMode::is_enabled()) {
        return {class_loss_grad_recorded(x, x.shape(), x.dtype(), l.target, g[0], reduction, count, ignore_index,
                                         label_smoothing, compute),
                Tensor()};
      }
      OpCall bcall(kCrossEntropyBackward, {g[0], x});
      Tensor gx = empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
      if (gx.numel()) {
        const Tensor w = grad_weight(bcall.input(0), reduction, count, compute, n, s);
        const Tensor g3 = internal::alias(gx, l.input.shape(), l.input.strides(), 0);
        cross_entropy_backward_stub(x.device().type, g3, w, l.input, l.target, lse, ignore_index, label_smoothing);
      }
      bcall.finish({&gx});
      return {gx, Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  OpCall call(kNllLoss, {log_probs, target});
  const Tensor& x = call.input(0);
  HG_CHECK(reduction != Reduction::BatchMean, "nll_loss", "Reduction::BatchMean is for kl_div only");
  ClassLayout l = class_layout("nll_loss", x, call.input(1));
  const int64_t n = l.input.shape()[0], s = l.input.shape()[2];
  const Dtype compute = detail::loss_compute_dtype(x.dtype());
  Tensor losses = empty(call.input(1).shape(), TensorOptions(compute).device(x.device()));
  const Tensor kept = zeros({}, TensorOptions(kInt64).device(x.device()));
  if (n * s > 0)
    nll_stub(x.device().type, internal::alias(losses, {n, s}, {s, 1}, 0), kept, l.input, l.target, ignore_index);
  const Tensor count = count_as(kept, compute);
  Tensor out = detail::reduce_loss(losses, reduction, count, x.dtype());
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [target = l.target, shape = x.shape(), dtype = x.dtype(), c = l.input.shape()[1], reduction, count,
          ignore_index, compute, n, s](const TensorList& g) -> TensorList {
      if (GradMode::is_enabled()) {
        return {class_loss_grad_recorded(Tensor(), shape, dtype, target, g[0], reduction, count, ignore_index, 0.0,
                                         compute),
                Tensor()};
      }
      OpCall bcall(kNllLossBackward, {g[0]});
      Tensor gx = zeros(shape, TensorOptions(dtype).device(g[0].device()));
      if (gx.numel()) {
        const Tensor w = grad_weight(bcall.input(0), reduction, count, compute, n, s);
        nll_backward_stub(gx.device().type, internal::alias(gx, {n, c, s}, {c * s, s, 1}, 0), w, target, ignore_index);
      }
      bcall.finish({&gx});
      return {gx, Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
