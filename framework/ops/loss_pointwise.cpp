// Elementwise losses: mse_loss, l1_loss, smooth_l1_loss, huber_loss, kl_div, binary_cross_entropy,
// binary_cross_entropy_with_logits. The
// forward is one kernel pass plus the reduction; backward formulas are composed from ops.
#include "framework/capture_state.h"
#include "framework/dispatch.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/loss.h"
#include "framework/ops/loss_kernels.h"
#include "framework/ops/minmax.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(pointwise_loss_stub, PointwiseLossFn);

namespace {
const OpDef kMseLoss{"mse_loss", true};
const OpDef kBce{"binary_cross_entropy", true};
const OpDef kBceWithLogits{"binary_cross_entropy_with_logits", true};
const OpDef kL1Loss{"l1_loss", true};
const OpDef kSmoothL1Loss{"smooth_l1_loss", true};
const OpDef kHuberLoss{"huber_loss", true};
const OpDef kKlDiv{"kl_div", true};

struct Prepared {
  Shape shape;
  Dtype out_dtype, compute;
  TensorList operands;  // converted to `compute` (undefined stays undefined)
};

// Checks the operands (floating, one device; target of the input's shape unless `broadcast`),
// picks the output dtype (promoted) and the compute dtype (float32 for 16-bit).
Prepared prepare(std::string_view op, const TensorList& in, bool broadcast, Reduction reduction) {
  const Tensor& x = in[0];
  Prepared p;
  HG_CHECK(x.defined() && in[1].defined(), op, "got an undefined tensor");
  HG_CHECK(reduction != Reduction::BatchMean || op == "kl_div", op, "Reduction::BatchMean is for kl_div only");
  p.shape = x.shape();
  p.out_dtype = x.dtype();
  for (const Tensor& t : in) {
    if (!t.defined()) continue;
    HG_CHECK(is_floating(t.dtype()), op, "expected floating-point tensors, got {} (shape {})", t.dtype(), t.shape());
    HG_CHECK(t.device() == x.device(), op, "tensors are on different devices: {} and {}", x.device(), t.device());
    p.out_dtype = promote_types(p.out_dtype, t.dtype());
  }
  if (broadcast) {
    p.shape = broadcast_shapes(x.shape(), in[1].shape(), op);
  } else {
    HG_CHECK(in[1].shape() == x.shape(), op, "target shape {} must match the input shape {}", in[1].shape(), x.shape());
  }
  if (in.size() > 2 && in[2].defined()) {
    const Shape& w = in[2].shape();
    bool fits = w.size() <= p.shape.size();
    for (size_t i = 0; fits && i < w.size(); ++i) {
      const int64_t have = w[w.size() - 1 - i], want = p.shape[p.shape.size() - 1 - i];
      fits = have == want || have == 1;
    }
    HG_CHECK(fits, op, "pos_weight of shape {} does not broadcast to the input shape {}", in[2].shape(), p.shape);
  }
  p.compute = detail::loss_compute_dtype(p.out_dtype);
  for (const Tensor& t : in) p.operands.push_back(t.defined() ? internal::cast(t, p.compute) : Tensor());
  return p;
}

// The count Mean divides by: every element, or dim 0's size for BatchMean (1 for a 0-d loss).
int64_t mean_count(const Prepared& p, Reduction reduction) {
  if (reduction == Reduction::BatchMean) return p.shape.empty() ? 1 : p.shape[0];
  return numel_of(p.shape);
}

Tensor run_forward(PointwiseLoss kind, const Prepared& p, Reduction reduction, double param = 0.0) {
  const Device dev = p.operands[0].device();
  Tensor per = empty(p.shape, TensorOptions(p.compute).device(dev));
  auto bcast = [&](const Tensor& t) { return t.defined() ? expand(t, p.shape) : t; };
  const Tensor c = p.operands.size() > 2 ? bcast(p.operands[2]) : Tensor();
  if (per.numel()) pointwise_loss_stub(dev.type, kind, per, bcast(p.operands[0]), bcast(p.operands[1]), c, param);
  const bool batch_mean = reduction == Reduction::BatchMean;
  return detail::reduce_loss(per, batch_mean ? Reduction::Mean : reduction, mean_count(p, reduction), p.out_dtype);
}

// The upstream gradient in the compute dtype, divided by the element count for Mean.
Tensor scaled_grad(const Tensor& g, Reduction reduction, int64_t numel, Dtype compute) {
  Tensor w = g.dtype() == compute ? g : g.to(compute);
  const bool mean = reduction == Reduction::Mean || reduction == Reduction::BatchMean;
  return mean ? w * (1.0 / static_cast<double>(numel)) : w;
}

// The operands a formula uses: the forward's converted copies, or, when the formula is recorded
// (create_graph), the saved inputs converted again by a recorded cast, so it differentiates
// through them.
TensorList formula_operands(const TensorList& converted, const std::vector<SavedTensor>& saved, Dtype compute) {
  if (!GradMode::is_enabled()) return converted;
  TensorList out;
  for (const SavedTensor& s : saved) {
    Tensor t = s.get();
    out.push_back(!t.defined() || t.dtype() == compute ? t : to(t, t.device(), compute));
  }
  return out;
}
std::vector<SavedTensor> save_inputs(const TensorList& inputs, const char* op) {
  std::vector<SavedTensor> saved;
  for (const Tensor& t : inputs) saved.emplace_back(t, op);
  return saved;
}

Tensor clamp_log(const Tensor& t) { return maximum(log(t), full_like(t, -100.0)); }

// sign(d) as a constant (its derivative is 0 almost everywhere), in d's dtype.
Tensor sign_of(const Tensor& d) { return gt(d, zeros_like(d)).to(d.dtype()) - lt(d, zeros_like(d)).to(d.dtype()); }

// The losses of d = input - target whose gradient is dloss/dd(d) for the input and minus it for
// the target.
template <class DerivFn>
Tensor difference_loss(const OpDef& def, const char* op, PointwiseLoss kind, const Tensor& input, const Tensor& target,
                       Reduction reduction, double param, DerivFn deriv) {
  OpCall call(def, {input, target});
  Prepared p = prepare(op, call.inputs(), /*broadcast=*/true, reduction);
  Tensor out = run_forward(kind, p, reduction, param);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ops = p.operands, saved = save_inputs(call.inputs(), op), reduction, numel = numel_of(p.shape),
          compute = p.compute, deriv](const TensorList& g) -> TensorList {
      const TensorList in = formula_operands(ops, saved, compute);
      Tensor d = scaled_grad(g[0], reduction, numel, compute) * deriv(in[0] - in[1]);
      return {d, -d};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return difference_loss(kL1Loss, "l1_loss", PointwiseLoss::AbsoluteError, input, target, reduction, 0.0,
                         [](const Tensor& d) { return sign_of(d); });
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  HG_CHECK(beta >= 0.0, "smooth_l1_loss", "beta must be >= 0, got {}", beta);
  if (beta == 0.0)  // PyTorch's rule: beta = 0 is the l1 loss (the quadratic piece would divide by 0)
    return difference_loss(kSmoothL1Loss, "smooth_l1_loss", PointwiseLoss::AbsoluteError, input, target, reduction, 0.0,
                           [](const Tensor& d) { return sign_of(d); });
  return difference_loss(kSmoothL1Loss, "smooth_l1_loss", PointwiseLoss::SmoothL1, input, target, reduction, beta,
                         [beta](const Tensor& d) { return clamp(d * (1.0 / beta), -1.0, 1.0); });
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  HG_CHECK(delta > 0.0, "huber_loss", "delta must be > 0, got {}", delta);
  return difference_loss(kHuberLoss, "huber_loss", PointwiseLoss::Huber, input, target, reduction, delta,
                         [delta](const Tensor& d) { return clamp(d, -delta, delta); });
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  OpCall call(kKlDiv, {input, target});
  Prepared p = prepare("kl_div", call.inputs(), /*broadcast=*/true, reduction);
  Tensor out = run_forward(log_target ? PointwiseLoss::KlDivLogTarget : PointwiseLoss::KlDiv, p, reduction);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ops = p.operands, saved = save_inputs(call.inputs(), "kl_div"), reduction, count = mean_count(p, reduction),
          compute = p.compute, log_target](const TensorList& g) -> TensorList {
      const TensorList in = formula_operands(ops, saved, compute);
      const Tensor &x = in[0], &t = in[1];
      const Tensor w = scaled_grad(g[0], reduction, count, compute);
      if (log_target) {
        const Tensor e = exp(t);
        return {-(w * e), w * e * (t - x + 1.0)};
      }
      // d/dt [t log t - t x] = log t + 1 - x (-inf at t = 0, as PyTorch's).
      return {-(w * t), w * (log(t) + 1.0 - x)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  OpCall call(kMseLoss, {input, target});
  Prepared p = prepare("mse_loss", call.inputs(), /*broadcast=*/true, reduction);
  Tensor out = run_forward(PointwiseLoss::SquaredError, p, reduction);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ops = p.operands, saved = save_inputs(call.inputs(), "mse_loss"), reduction, numel = numel_of(p.shape),
          compute = p.compute](const TensorList& g) -> TensorList {
      const TensorList in = formula_operands(ops, saved, compute);
      const Tensor &a = in[0], &b = in[1];
      Tensor d = scaled_grad(g[0], reduction, numel, compute) * (a - b) * 2.0;
      return {d, -d};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction) {
  capture::refuse_host_sync("binary_cross_entropy", probs.device(),
                            "check that the probabilities lie in [0, 1] on the host (binary_cross_entropy_with_logits "
                            "needs no check)");
  OpCall call(kBce, {probs, target});
  Prepared p = prepare("binary_cross_entropy", call.inputs(), /*broadcast=*/false, reduction);
  Tensor out = run_forward(PointwiseLoss::BinaryCrossEntropy, p, reduction);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ops = p.operands, saved = save_inputs(call.inputs(), "binary_cross_entropy"), reduction,
          numel = numel_of(p.shape), compute = p.compute](const TensorList& g) -> TensorList {
      const TensorList in = formula_operands(ops, saved, compute);
      const Tensor &x = in[0], &y = in[1];
      const Tensor w = scaled_grad(g[0], reduction, numel, compute);
      // PyTorch's formula: (p - y) / max(p (1 - p), 1e-12) keeps the gradient finite at 0 and 1.
      const Tensor one_minus = 1.0 - x;
      Tensor gx = w * (x - y) / maximum(x * one_minus, full_like(x, 1e-12));
      Tensor gy = w * (clamp_log(one_minus) - clamp_log(x));
      return {gx, gy};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction,
                                        const Tensor& pos_weight) {
  OpCall call(kBceWithLogits, {logits, target, pos_weight});
  Prepared p = prepare("binary_cross_entropy_with_logits", call.inputs(), /*broadcast=*/false, reduction);
  Tensor out = run_forward(PointwiseLoss::BinaryCrossEntropyWithLogits, p, reduction);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [ops = p.operands, saved = save_inputs(call.inputs(), "binary_cross_entropy_with_logits"), reduction,
          numel = numel_of(p.shape), compute = p.compute](const TensorList& g) -> TensorList {
      const TensorList in = formula_operands(ops, saved, compute);
      const Tensor &x = in[0], &y = in[1], &pw = in[2];
      // loss = (1 - y) x + l softplus(-x), with l = 1 + (pw - 1) y (l = 1 without pos_weight).
      const Tensor w = scaled_grad(g[0], reduction, numel, compute);
      const Tensor sp = softplus(-x);
      const Tensor l = pw.defined() ? 1.0 + (pw - 1.0) * y : Tensor();
      const Tensor s = sigmoid(-x);
      Tensor gx = w * ((1.0 - y) - (l.defined() ? l * s : s));
      Tensor gy = w * (pw.defined() ? (pw - 1.0) * sp - x : -x);
      Tensor gpw = pw.defined() ? w * y * sp : Tensor();
      return {gx, gy, gpw};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
