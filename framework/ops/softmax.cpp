// softmax / log_softmax: one fused kernel pass forward, one backward, reusing the output.
#include "framework/ops/softmax_kernels.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(softmax_stub, SoftmaxFn);
HG_DEFINE_STUB(softmax_backward_stub, SoftmaxBackwardFn);

namespace {
const OpDef kSoftmax{"softmax", true};
const OpDef kLogSoftmax{"log_softmax", true};
const OpDef kSoftmaxBackward{"softmax_backward", false};
const OpDef kLogSoftmaxBackward{"log_softmax_backward", false};

Tensor run(const OpDef& def, bool log, const Tensor& t, int64_t dim_in, std::optional<Dtype> dtype) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  HG_CHECK(is_floating(x.dtype()), def.name, "expected a floating-point tensor, got {} (shape {})", x.dtype(),
           x.shape());
  const Dtype out_dtype = dtype.value_or(call.output_dtype().value_or(x.dtype()));
  HG_CHECK(is_floating(out_dtype), def.name, "the output dtype must be floating-point, got {}", out_dtype);
  // A 0-d tensor accepts dim 0 or -1 (as PyTorch) and is one row of one element.
  const int64_t dim = normalize_dim(dim_in, x.dim(), def.name);
  const Tensor in = internal::contiguous(x);
  Tensor out = empty(x.shape(), TensorOptions(out_dtype).device(x.device()));
  if (out.numel()) softmax_stub(x.device().type, internal::as_3d(out, dim), internal::as_3d(in, dim), log);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [log, dim, sy = SavedTensor::output(out, def.name)](const TensorList& g) -> TensorList {
      const Tensor y = sy.get();
      if (GradMode::is_enabled()) {
        // Recorded (create_graph): the same formula in public ops, so it can be differentiated again.
        const Tensor go = g[0].dtype() == y.dtype() ? g[0] : to(g[0], y.device(), y.dtype());
        if (log) return {go - exp(y) * sum(go, {dim}, true)};
        return {y * (go - sum(go * y, {dim}, true))};
      }
      OpCall bcall(log ? kLogSoftmaxBackward : kSoftmaxBackward, {g[0], y});
      const Tensor go = internal::contiguous(internal::cast(bcall.input(0), y.dtype()));
      Tensor gx = empty(y.shape(), TensorOptions(y.dtype()).device(y.device()));
      if (gx.numel()) {
        softmax_backward_stub(y.device().type, internal::as_3d(gx, dim), internal::as_3d(go, dim),
                              internal::as_3d(y, dim), log);
      }
      bcall.finish({&gx});
      return {gx};  // in the output's dtype; the engine casts it to the input's
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype) { return run(kSoftmax, false, x, dim, dtype); }
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<Dtype> dtype) {
  return run(kLogSoftmax, true, x, dim, dtype);
}

Tensor Tensor::softmax(int64_t dim) const { return hg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return hg::log_softmax(*this, dim); }

}  // namespace hg
