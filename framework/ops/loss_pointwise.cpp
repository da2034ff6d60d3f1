// Elementwise losses: mse_loss, binary_cross_entropy, binary_cross_entropy_with_logits. The
// forward is one kernel pass plus the reduction; backward formulas are composed from ops.
#include "framework/dispatch.h"
#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/loss.h"
#include "framework/ops/loss_kernels.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(pointwise_loss_stub, PointwiseLossFn);

namespace {
const OpDef kMseLoss{"mse_loss", true};
const OpDef kBce{"binary_cross_entropy", true};
const OpDef kBceWithLogits{"binary_cross_entropy_with_logits", true};

struct Prepared {
  Shape shape;
  Dtype out_dtype, compute;
  TensorList operands;  // converted to `compute` (undefined stays undefined)
};

// Checks the operands (floating, one device; target of the input's shape unless `broadcast`),
// picks the output dtype (promoted) and the compute dtype (float32 for 16-bit).
Prepared prepare(std::string_view op, const TensorList& in, bool broadcast) {
  const Tensor& x = in[0];
  Prepared p;
  HG_CHECK(x.defined() && in[1].defined(), op, "got an undefined tensor");
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

Tensor run_forward(PointwiseLoss kind, const Prepared& p, Reduction reduction) {
  const Device dev = p.operands[0].device();
  Tensor per = empty(p.shape, TensorOptions(p.compute).device(dev));
  auto bcast = [&](const Tensor& t) { return t.defined() ? expand(t, p.shape) : t; };
  const Tensor c = p.operands.size() > 2 ? bcast(p.operands[2]) : Tensor();
  if (per.numel()) pointwise_loss_stub(dev.type, kind, per, bcast(p.operands[0]), bcast(p.operands[1]), c);
  return detail::reduce_loss(per, reduction, per.numel(), p.out_dtype);
}

// The upstream gradient in the compute dtype, divided by the element count for Mean.
Tensor scaled_grad(const Tensor& g, Reduction reduction, int64_t numel, Dtype compute) {
  Tensor w = g.dtype() == compute ? g : g.to(compute);
  return reduction == Reduction::Mean ? w * (1.0 / static_cast<double>(numel)) : w;
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
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  OpCall call(kMseLoss, {input, target});
  Prepared p = prepare("mse_loss", call.inputs(), /*broadcast=*/true);
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
  OpCall call(kBce, {probs, target});
  Prepared p = prepare("binary_cross_entropy", call.inputs(), /*broadcast=*/false);
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
  Prepared p = prepare("binary_cross_entropy_with_logits", call.inputs(), /*broadcast=*/false);
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
