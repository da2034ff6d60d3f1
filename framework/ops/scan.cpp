// cumsum: a scan kernel along the dim; the gradient is the reversed cumulative sum of the
// upstream gradient, written with public ops (flip, cumsum) so it can be differentiated again.
#include "framework/ops/scan_kernels.h"

#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/shaping.h"

namespace hg {

HG_DEFINE_STUB(cumsum_stub, CumsumFn);

namespace {
const OpDef kCumsum{"cumsum", true};
}  // namespace

Tensor cumsum(const Tensor& t, int64_t dim, std::optional<Dtype> dtype) {
  OpCall call(kCumsum, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), "cumsum", "got an undefined tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "cumsum");
  const Dtype out_dtype = dtype.value_or(call.output_dtype().value_or(is_floating(x.dtype()) ? x.dtype() : kInt64));
  HG_CHECK(out_dtype != kBool, "cumsum", "cannot sum into a bool tensor (input {}, shape {})", x.dtype(), x.shape());
  Tensor out = empty(x.shape(), TensorOptions(out_dtype).device(x.device()));
  if (out.numel()) {
    const Tensor in = internal::contiguous(x);
    cumsum_stub(x.device().type, internal::as_3d(out, d), internal::as_3d(in, d));
  }
  BackwardFn bw;
  if (call.needs_grad() && is_floating(out_dtype)) {
    bw = [d, in_dtype = x.dtype()](const TensorList& g) -> TensorList {
      if (g[0].dim() == 0) return {g[0].to(in_dtype)};
      Tensor gx = flip(cumsum(flip(g[0], {d}), d), {d});
      return {gx.dtype() == in_dtype ? gx : gx.to(in_dtype)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor Tensor::cumsum(int64_t dim, std::optional<Dtype> dtype) const { return hg::cumsum(*this, dim, dtype); }

}  // namespace hg
