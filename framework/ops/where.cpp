// where and masked_fill: elementwise selection with broadcasting; the gradient of each branch
// is the upstream gradient where that branch was picked.
#include "framework/dispatch.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/indexing_kernels.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"
#include "framework/view_history.h"

namespace hg {

HG_DEFINE_STUB(where_stub, WhereFn);

namespace {
const OpDef kWhere{"where", true};
const OpDef kMaskedFill{"masked_fill", true};
const OpDef kMaskedFillInPlace{"masked_fill_", true};

void check_mask(std::string_view op, const char* what, const Tensor& mask, const Tensor& x) {
  HG_CHECK(mask.defined() && x.defined(), op, "got an undefined tensor");
  HG_CHECK(mask.dtype() == kBool, op, "expected a bool {}, got {} (shape {}); compare to get one, e.g. x > 0", what,
           mask.dtype(), mask.shape());
  HG_CHECK(mask.device() == x.device(), op, "{} is on {} but the input is on {}", what, mask.device(), x.device());
}
}  // namespace

Tensor where(const Tensor& cond_in, const Tensor& a_in, const Tensor& b_in) {
  OpCall call(kWhere, {cond_in, a_in, b_in});
  const Tensor &cond = call.input(0), &a = call.input(1), &b = call.input(2);
  check_mask("where", "condition", cond, a);
  HG_CHECK(b.defined() && a.device() == b.device(), "where", "a and b must be defined tensors on one device");
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const Dtype dtype = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, TensorOptions(dtype).device(a.device()));
  if (out.numel()) {
    where_stub(out.device().type, out, internal::expanded(cond, shape),
               internal::expanded(internal::cast(a, dtype), shape),
               internal::expanded(internal::cast(b, dtype), shape));
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [cond = cond.detach()](const TensorList& g) -> TensorList {
      const Tensor zero = zeros({}, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {Tensor(), where(cond, g[0], zero), where(cond, zero, g[0])};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor masked_fill(const Tensor& x_in, const Tensor& mask_in, double value) {
  OpCall call(kMaskedFill, {x_in, mask_in});
  const Tensor &x = call.input(0), &mask = call.input(1);
  check_mask("masked_fill", "mask", mask, x);
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  Tensor out = empty(shape, TensorOptions(x.dtype()).device(x.device()));
  if (out.numel()) {
    const Tensor fill = scalar_tensor(value, TensorOptions(x.dtype()).device(x.device()));
    where_stub(out.device().type, out, internal::expanded(mask, shape), internal::expanded(fill, shape),
               internal::expanded(x, shape));
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [mask = mask.detach()](const TensorList& g) -> TensorList {
      const Tensor zero = zeros({}, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {where(mask, zero, g[0]), Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor& Tensor::masked_fill_(const Tensor& mask_in, double value) {
  check_in_place(*this, "masked_fill_", {mask_in});
  OpCall call(kMaskedFillInPlace, {*this, mask_in});
  const Tensor& mask = call.input(1);
  check_mask("masked_fill_", "mask", mask, *this);
  HG_CHECK(broadcast_shapes(shape(), mask.shape(), "masked_fill_") == shape(), "masked_fill_",
           "mask of shape {} cannot be broadcast to the tensor's shape {}", mask.shape(), shape());
  if (numel()) {
    const Tensor fill = scalar_tensor(value, TensorOptions(dtype()).device(device()));
    where_stub(device().type, *this, internal::expanded(mask, shape()), internal::expanded(fill, shape()), *this);
  }
  bump_version();
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [mask = mask.detach()](const TensorList& g) -> TensorList {
      const Tensor zero = zeros({}, TensorOptions(g[0].dtype()).device(g[0].device()));
      return {where(mask, zero, g[0]), Tensor()};
    };
  }
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

}  // namespace hg
