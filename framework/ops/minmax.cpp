// max/min/argmax/argmin through the shared reduce kernel, and clamp.
#include "framework/ops/minmax_kernels.h"

#include <cmath>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/reduce_kernels.h"
#include "framework/ops/views.h"
#include "framework/view_history.h"

namespace hg {

HG_DEFINE_STUB(clamp_stub, ClampFn);

namespace {
const OpDef kMax{"max", true};
const OpDef kMin{"min", true};
const OpDef kArgmax{"argmax", false};
const OpDef kArgmin{"argmin", false};
const OpDef kClamp{"clamp", true};
const OpDef kClampInPlace{"clamp_", true};

std::vector<int64_t> all_dims(const Tensor& t) {
  std::vector<int64_t> d(static_cast<size_t>(t.dim()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>(i);
  return d;
}

// Runs `op` of reduce_stub over `dims` into a tensor of `dtype`.
Tensor reduce_into(std::string_view name, ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                   Dtype dtype) {
  HG_CHECK(x.defined(), name, "got an undefined tensor");
  ReduceLayout layout = reduce_layout(x, dims, keepdim, name);
  HG_CHECK(layout.flat.shape()[1] > 0 || layout.flat.shape()[0] == 0, name,
           "cannot reduce over an empty dim (input shape {}): the result would have no value", x.shape());
  Tensor out = empty(layout.out_shape, TensorOptions(dtype).device(x.device()));
  if (out.numel()) reduce_stub(x.device().type, op, internal::alias(out, {out.numel()}, {1}, 0), layout.flat);
  return out;
}

Tensor full_reduce(const OpDef& def, ReduceOp op, const Tensor& t) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined() && x.numel() > 0, def.name,
           "expected a non-empty tensor, got shape {}; pass a dim to reduce an empty tensor along",
           x.defined() ? x.shape() : Shape{});
  Tensor out = reduce_into(def.name, op, x, all_dims(x), false, x.dtype());
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, def.name), sy = SavedTensor::output(out, def.name)](const TensorList& g) -> TensorList {
      // Every element equal to the result shares the gradient (PyTorch's evenly-distributed rule).
      const Tensor mask = eq(sx.get(), sy.get()).to(g[0].dtype());
      return {mask * (g[0] / sum(mask))};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

std::pair<Tensor, Tensor> dim_reduce(const OpDef& def, bool is_max, const Tensor& t, int64_t dim, bool keepdim) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  const int64_t d = normalize_dim(dim, x.dim(), def.name);
  Tensor values = reduce_into(def.name, is_max ? ReduceOp::Max : ReduceOp::Min, x, {d}, keepdim, x.dtype());
  Tensor indices = reduce_into(def.name, is_max ? ReduceOp::ArgMax : ReduceOp::ArgMin, x, {d}, keepdim, kInt64);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [shape = x.shape(), d, keepdim, indices](const TensorList& g) -> TensorList {
      if (shape.empty()) return {g[0].reshape({})};
      Tensor gv = keepdim ? g[0] : g[0].unsqueeze(d);
      Tensor idx = keepdim ? indices : indices.unsqueeze(d);
      Tensor gx = zeros(shape, TensorOptions(gv.dtype()).device(gv.device()));
      return {scatter_add(gx, d, idx, gv)};
    };
  }
  call.finish({&values, &indices}, std::move(bw));
  return {values, indices};
}

Tensor arg_reduce(const OpDef& def, ReduceOp op, const Tensor& t, int64_t dim, bool keepdim) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  Tensor out = reduce_into(def.name, op, x, {normalize_dim(dim, x.dim(), def.name)}, keepdim, kInt64);
  call.finish({&out});
  return out;
}
}  // namespace

Tensor max(const Tensor& x) { return full_reduce(kMax, ReduceOp::Max, x); }
Tensor min(const Tensor& x) { return full_reduce(kMin, ReduceOp::Min, x); }
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return dim_reduce(kMax, true, x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return dim_reduce(kMin, false, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce(kArgmax, ReduceOp::ArgMax, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce(kArgmin, ReduceOp::ArgMin, x, dim, keepdim);
}

namespace {
// Whether a clamp bound has a fractional part (it does not fit an integer tensor).
bool fractional_bound(std::optional<double> lo, std::optional<double> hi) {
  auto fractional = [](std::optional<double> v) { return v && std::floor(*v) != *v; };
  return fractional(lo) || fractional(hi);
}
}  // namespace

Tensor clamp(const Tensor& t, std::optional<double> lo, std::optional<double> hi) {
  OpCall call(kClamp, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), "clamp", "got an undefined tensor");
  HG_CHECK(lo.has_value() || hi.has_value(), "clamp", "at least one of min and max must be given");
  HG_CHECK(x.dtype() != kBool, "clamp", "not supported on bool tensors");
  // A fractional bound on an integer tensor gives a float32 result (PyTorch's type promotion).
  const Dtype dtype = !is_floating(x.dtype()) && fractional_bound(lo, hi) ? kFloat32 : x.dtype();
  const Tensor in = internal::cast(x, dtype);
  Tensor out = empty(x.shape(), TensorOptions(dtype).device(x.device()));
  if (out.numel()) clamp_stub(x.device().type, out, in, lo, hi);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sx = SavedTensor(x, "clamp"), lo, hi](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();
      Tensor gx = g[0];
      if (lo) gx = gx * ge(x, full_like(x, *lo)).to(gx.dtype());
      if (hi) gx = gx * le(x, full_like(x, *hi)).to(gx.dtype());
      return {gx};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  check_in_place(*this, "clamp_");
  OpCall call(kClampInPlace, {*this});
  HG_CHECK(defined(), "clamp_", "got an undefined tensor");
  HG_CHECK(lo.has_value() || hi.has_value(), "clamp_", "at least one of min and max must be given");
  HG_CHECK(dtype() != kBool, "clamp_", "not supported on bool tensors");
  HG_CHECK(is_floating(dtype()) || !fractional_bound(lo, hi), "clamp_",
           "a fractional bound cannot be stored in a {} tensor", dtype());
  BackwardFn bw;
  if (call.needs_grad()) {
    // The gradient passes where the old value was within the bounds (inclusive, as clamp).
    Tensor inside;
    {
      NoGradGuard no_grad;
      const Tensor x = detach();
      if (lo) inside = ge(x, full_like(x, *lo)).to(x.dtype());
      if (hi) {
        const Tensor below = le(x, full_like(x, *hi)).to(x.dtype());
        inside = inside.defined() ? inside * below : below;
      }
    }
    bw = [inside](const TensorList& g) -> TensorList { return {g[0] * inside.to(g[0].dtype())}; };
  }
  if (numel()) clamp_stub(device().type, *this, *this, lo, hi);
  bump_version();
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  HG_CHECK(x.defined(), "clamp", "got an undefined tensor");
  HG_CHECK(lo.defined() || hi.defined(), "clamp", "at least one of min and max must be given");
  HG_CHECK(x.dtype() != kBool, "clamp", "not supported on bool tensors");
  Tensor out = x;
  for (const auto* bound : {&lo, &hi}) {
    if (!bound->defined()) continue;
    const Tensor& b = *bound;
    const char* what = bound == &lo ? "min" : "max";
    HG_CHECK(b.device() == x.device(), "clamp", "{} is on {} but the input is on {}", what, b.device(), x.device());
    HG_CHECK(b.dtype() != kBool, "clamp", "{} is a bool tensor", what);
    broadcast_shapes(x.shape(), b.shape(), "clamp");  // names clamp when the shapes do not broadcast
    out = where(bound == &lo ? lt(out, b) : gt(out, b), b, out);
  }
  return out;
}

Tensor Tensor::max() const { return hg::max(*this); }
Tensor Tensor::min() const { return hg::min(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return hg::argmax(*this, dim, keepdim); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const { return hg::clamp(*this, lo, hi); }
Tensor Tensor::clamp(const Tensor& lo, const Tensor& hi) const { return hg::clamp(*this, lo, hi); }

}  // namespace hg
