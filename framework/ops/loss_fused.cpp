#include "framework/ops/loss_fused.h"

#include <memory>

#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/loss_fused_kernels.h"
#include "framework/ops/loss_kernels.h"

namespace hg {

HG_DEFINE_OPTIONAL_STUB(cross_entropy_fused_stub, CrossEntropyFusedFn);

namespace {
// Not double-differentiable: the backward scales a buffer the forward filled.
const OpDef kCrossEntropyFused{"cross_entropy_fused_", true, false};
}  // namespace

Tensor cross_entropy_fused_(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                            double label_smoothing, int64_t classes) {
  constexpr const char* op = "cross_entropy_fused_";
  HG_CHECK(logits.defined() && target.defined(), op, "got an undefined tensor");
  OpCall call(kCrossEntropyFused, {logits, target});
  const Tensor& x = call.input(0);
  const Tensor& t = call.input(1);
  HG_CHECK(reduction != Reduction::BatchMean, op, "Reduction::BatchMean is for kl_div only");
  HG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, "label_smoothing must be in [0, 1], got {}",
           label_smoothing);
  HG_CHECK(is_floating(x.dtype()), op, "expected floating-point logits, got {}", x.dtype());
  HG_CHECK(x.dim() == 2, op, "expected logits of shape [N, C], got {}; reshape them (e.g. to [-1, vocab])", x.shape());
  HG_CHECK(t.dtype() == kInt64 && t.dim() == 1 && t.size(0) == x.size(0), op,
           "expected an int64 target of shape [{}], got {} of shape {}", x.size(0), t.dtype(), t.shape());
  HG_CHECK(x.device() == t.device(), op, "logits and target are on different devices: {} and {}", x.device(),
           t.device());
  const bool grad = call.needs_grad() && x.requires_grad();
  HG_CHECK(!(grad && x.is_leaf()), op,
           "the logits are a leaf that requires grad: this op overwrites them with their gradient; use cross_entropy");

  const int64_t n = x.size(0), c = x.size(1);
  HG_CHECK(classes == -1 || (classes >= 1 && classes <= c), op,
           "classes must be -1 (every column) or in [1, {}] (the logits' columns), got {}", c, classes);
  if (classes == -1) classes = c;
  const bool one_pass = cross_entropy_fused_stub.has(x.device().type);
  HG_CHECK(one_pass || classes == c, op,
           "padding columns (classes {} of {}) need the one-pass kernel, which {} does not have", classes, c,
           x.device());
  const Dtype compute = detail::loss_compute_dtype(x.dtype());
  Tensor buffer = internal::contiguous(x);  // the logits themselves when contiguous
  const Tensor x3 = internal::alias(buffer, {n, c, 1}, {c, 1, 1}, buffer.offset());
  const Tensor tc = internal::contiguous(t);
  const Tensor t2 = internal::alias(tc, {n, 1}, {1, 1}, tc.offset());
  Tensor losses = empty({n}, TensorOptions(compute).device(x.device()));
  const Tensor kept = zeros({}, TensorOptions(kInt64).device(x.device()));
  Tensor lse;
  if (one_pass) {
    if (n > 0)
      cross_entropy_fused_stub(x.device().type, losses, kept, buffer, tc, classes, ignore_index, label_smoothing,
                               reduction == Reduction::Mean, grad && c > 0);
  } else {
    lse = empty({n, 1}, TensorOptions(compute).device(x.device()));
    if (n > 0)
      cross_entropy_stub(x.device().type, internal::alias(losses, {n, 1}, {1, 1}, 0), lse, kept, x3, t2, ignore_index,
                         label_smoothing);
  }
  Tensor count = empty({}, TensorOptions(compute).device(x.device()));
  copy_stub(x.device().type, count, kept);
  Tensor out = detail::reduce_loss(losses, reduction, count, compute);

  BackwardFn bw;
  if (grad) {
    // Without the one-pass kernel: the gradient for an upstream gradient of 1 written over the
    // logits by cross_entropy's backward kernel (each row read before its gradient is written, so
    // in place is safe), weighted by the mean's 1/count or 1.
    if (!one_pass && n * c > 0) {
      const Tensor w = reduction == Reduction::Mean ? 1.0 / count : ones({}, TensorOptions(compute).device(x.device()));
      cross_entropy_backward_stub(x.device().type, x3, w, x3, t2, lse, ignore_index, label_smoothing);
    }
    buffer.bump_version();  // the logits' storage: anything else that saved them sees the write
    auto taken = std::make_shared<bool>(false);
    bw = [buffer = buffer.detach(), taken, reduction, n](const TensorList& g) -> TensorList {
      HG_CHECK(!*taken, "cross_entropy_fused_",
               "its gradient lives in the logits and can be taken once; use cross_entropy to run backward twice");
      *taken = true;
      Tensor gx = buffer;
      if (!g[0].defined()) return {Tensor(), Tensor()};
      const Tensor scale = g[0].to(buffer.dtype());
      if (reduction == Reduction::None) {
        gx.mul_(scale.reshape({n, 1}));
      } else if (!(scale.device().is_cpu() && scale.item<double>() == 1.0)) {  // loss.backward(): nothing to do
        gx.mul_(scale);
      }
      return {gx, Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
