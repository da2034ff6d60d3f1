#include "framework/ops/reduce_kernels.h"

#include <algorithm>

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(reduce_stub, ReduceFn);
HG_DEFINE_OPTIONAL_STUB(sum_columns_stub, SumColumnsFn);

namespace {
const OpDef kSum{"sum", true};

std::vector<int64_t> all_dims(const Tensor& t) {
  std::vector<int64_t> d(static_cast<size_t>(t.dim()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>(i);
  return d;
}
}  // namespace

ReduceLayout reduce_layout(const Tensor& t, std::vector<int64_t> dims, bool keepdim, std::string_view op,
                           bool columns_ok) {
  const int64_t nd = t.dim();
  std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  for (int64_t& d : dims) {
    d = normalize_dim(d, nd, op);
    HG_CHECK(!reduced[static_cast<size_t>(d)] || nd == 0, op, "dim {} appears more than once", d);
    reduced[static_cast<size_t>(d)] = true;
  }
  std::vector<int64_t> order;
  ReduceLayout r;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t s = t.shape()[static_cast<size_t>(d)];
    if (reduced[static_cast<size_t>(d)]) {
      inner *= s;
      r.kept_shape.push_back(1);
      if (keepdim) r.out_shape.push_back(1);
    } else {
      order.push_back(d);
      outer *= s;
      r.kept_shape.push_back(s);
      r.out_shape.push_back(s);
    }
  }
  r.reduced = inner;
  // Reduced dims 0..k-1 of a contiguous tensor, some dim kept: rows of a [inner, outer] matrix.
  int64_t leading = 0;
  while (leading < nd && reduced[static_cast<size_t>(leading)]) ++leading;
  if (columns_ok && leading > 0 && leading == static_cast<int64_t>(dims.size()) && leading < nd && t.is_contiguous()) {
    r.columns = true;
    r.flat = internal::alias(t, {inner, outer}, {outer, 1}, t.offset());
    return r;
  }
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[static_cast<size_t>(d)]) order.push_back(d);
  // The permute is a view on the detached tensor; contiguous() copies only when needed.
  Shape moved_shape;
  Strides moved_strides;
  for (int64_t d : order) {
    moved_shape.push_back(t.shape()[static_cast<size_t>(d)]);
    moved_strides.push_back(t.strides()[static_cast<size_t>(d)]);
  }
  const Tensor moved = internal::alias(t, std::move(moved_shape), std::move(moved_strides), t.offset());
  const Tensor flat = internal::contiguous(moved);
  r.flat = internal::alias(flat, {outer, inner}, {inner, 1}, flat.offset());
  return r;
}

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim, std::optional<Dtype> dtype) {
  OpCall call(kSum, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), "sum", "got an undefined tensor");
  Dtype out_dtype = dtype.value_or(call.output_dtype().value_or(is_floating(x.dtype()) ? x.dtype() : kInt64));
  if (is_float8(x.dtype()) || is_float8(out_dtype)) refuse_float8(is_float8(x.dtype()) ? x.dtype() : out_dtype, "sum");
  ReduceLayout layout = reduce_layout(x, dims, keepdim, "sum", sum_columns_stub.has(x.device().type));
  Tensor out = empty(layout.out_shape, TensorOptions(out_dtype).device(x.device()));
  if (layout.reduced == 0) {
    if (out.numel()) fill_stub(out.device().type, out, 0.0);
  } else if (out.numel()) {
    const Tensor out_flat = internal::alias(out, {out.numel()}, {1}, 0);
    if (layout.columns) {
      sum_columns_stub(x.device().type, out_flat, layout.flat);
    } else {
      reduce_stub(x.device().type, ReduceOp::Sum, out_flat, layout.flat);
    }
  }
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), kept = layout.kept_shape](const TensorList& g) -> TensorList {
      return {g[0].reshape(kept).expand(shape)};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor sum(const Tensor& t, std::optional<Dtype> dtype) { return sum(t, all_dims(t), false, dtype); }

Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  HG_CHECK(t.defined(), "mean", "got an undefined tensor");
  HG_CHECK(is_floating(t.dtype()), "mean", "expected a floating-point tensor, got {}; convert it with to() first",
           t.dtype());
  int64_t count = 1;
  std::vector<int64_t> d = dims;
  for (int64_t& i : d)
    count *= t.shape().empty() ? 1 : t.shape()[static_cast<size_t>(normalize_dim(i, t.dim(), "mean"))];
  // 16-bit floats are summed and scaled in float32 and rounded once.
  const Dtype acc = is_reduced_float(t.dtype()) ? kFloat32 : t.dtype();
  Tensor m = sum(t, dims, keepdim, acc) * (1.0 / static_cast<double>(count));
  return m.dtype() == t.dtype() ? m : m.to(t.dtype());
}

Tensor mean(const Tensor& t) { return mean(t, all_dims(t), false); }

Tensor Tensor::sum() const { return hg::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& d, bool k) const { return hg::sum(*this, d, k); }
Tensor Tensor::mean() const { return hg::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& d, bool k) const { return hg::mean(*this, d, k); }

}  // namespace hg
