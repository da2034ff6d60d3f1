#include "framework/ops/binary_kernels.h"

#include <cmath>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"
#include "framework/view_history.h"

namespace hg {

HG_DEFINE_STUB(binary_stub, BinaryFn);

namespace {
const OpDef kAdd{"add", true};
const OpDef kSub{"sub", true};
const OpDef kMul{"mul", true};
const OpDef kDiv{"div", true};
const OpDef kMaximum{"maximum", true};
const OpDef kMinimum{"minimum", true};
const OpDef kEq{"eq", false};
const OpDef kNe{"ne", false};
const OpDef kLt{"lt", false};
const OpDef kLe{"le", false};
const OpDef kGt{"gt", false};
const OpDef kGe{"ge", false};
const OpDef kAddInPlace{"add_", true};
const OpDef kSubInPlace{"sub_", true};
const OpDef kMulInPlace{"mul_", true};
const OpDef kDivInPlace{"div_", true};

bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// Checks devices, promotes dtypes and broadcasts; returns (a, b) ready for the kernel and the
// output tensor.
struct Prepared {
  Tensor a, b, out;
};
Prepared prepare(std::string_view name, BinaryOp op, const Tensor& a, const Tensor& b) {
  HG_CHECK(a.defined() && b.defined(), name, "got an undefined tensor");
  HG_CHECK(a.device() == b.device(), name, "tensors are on different devices: {} and {}", a.device(), b.device());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Dtype compute = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::Div && !is_floating(compute)) compute = kFloat32;  // true division
  HG_CHECK(is_comparison(op) || compute != kBool || op == BinaryOp::Maximum || op == BinaryOp::Minimum, name,
           "arithmetic on bool tensors is not supported; convert them with to() first");
  Prepared p;
  p.a = expand(a.to(compute), shape);
  p.b = expand(b.to(compute), shape);
  p.out = empty(shape, TensorOptions(is_comparison(op) ? kBool : compute).device(a.device()),
                internal::output_format(shape, {&a, &b}));
  return p;
}

Tensor run(const OpDef& def, BinaryOp op, const Tensor& a_in, const Tensor& b_in, double alpha = 1.0) {
  OpCall call(def, {a_in, b_in});
  const Tensor& a = call.input(0);
  const Tensor& b = call.input(1);
  Prepared p = prepare(def.name, op, a, b);
  if (p.out.numel()) binary_stub(p.out.device().type, op, p.out, p.a, p.b, alpha);
  BackwardFn bw;
  if (call.needs_grad()) {
    SavedTensor sa(a, def.name), sb(b, def.name);
    // Only the gradients an input needs are computed (a product with a constant, such as
    // GradScaler's loss * scale, runs one multiply in backward, not two).
    bw = [op, alpha, sa, sb, need_a = a.requires_grad(),
          need_b = b.requires_grad()](const TensorList& g) -> TensorList {
      const Tensor& go = g[0];
      switch (op) {
        case BinaryOp::Add: return {go, alpha == 1.0 ? go : need_b ? go * alpha : Tensor()};
        case BinaryOp::Sub: return {go, need_b ? go * -alpha : Tensor()};
        case BinaryOp::Mul: return {need_a ? go * sb.get() : Tensor(), need_b ? go * sa.get() : Tensor()};
        case BinaryOp::Div: {
          const Tensor& y = sb.get();
          return {need_a ? go / y : Tensor(), need_b ? -go * sa.get() / (y * y) : Tensor()};
        }
        case BinaryOp::Maximum:
        case BinaryOp::Minimum: {
          // Ties split the gradient evenly, as PyTorch does.
          const Tensor& x = sa.get();
          const Tensor& y = sb.get();
          Tensor pick_a = op == BinaryOp::Maximum ? gt(x, y) : lt(x, y);
          Tensor tie = eq(x, y);
          Tensor wa = pick_a.to(go.dtype()) + tie.to(go.dtype()) * 0.5;
          return {go * wa, go * (1.0 - wa)};
        }
        default: return {Tensor(), Tensor()};
      }
    };
  }
  call.finish({&p.out}, std::move(bw));
  return p.out;
}

// The gradients of an in-place binary op: self's old value first, then `other` (summed back to
// its shape by the engine). `old_self` is kept only when other's gradient needs it.
BackwardFn in_place_backward(BinaryOp op, const Tensor& other, const Tensor& old_self, double alpha, const char* name) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub: {
      const double k = op == BinaryOp::Add ? alpha : -alpha;
      return [k](const TensorList& g) -> TensorList { return {g[0], k == 1.0 ? g[0] : g[0] * k}; };
    }
    case BinaryOp::Mul:
      return [so = SavedTensor(other, name), sx = SavedTensor(old_self, name)](const TensorList& g) -> TensorList {
        const Tensor x = sx.get();
        return {g[0] * so.get(), x.defined() ? g[0] * x : Tensor()};
      };
    case BinaryOp::Div:
      return [so = SavedTensor(other, name), sx = SavedTensor(old_self, name)](const TensorList& g) -> TensorList {
        const Tensor o = so.get(), x = sx.get();
        return {g[0] / o, x.defined() ? -(g[0] * x) / (o * o) : Tensor()};
      };
    default: return nullptr;
  }
}

Tensor& run_in_place(const OpDef& def, BinaryOp op, Tensor& self, const Tensor& other, double alpha) {
  check_in_place(self, def.name, {other});
  OpCall call(def, {self, other});
  HG_CHECK(self.device() == other.device(), def.name, "tensors are on different devices: {} and {}", self.device(),
           other.device());
  const Dtype result = promote_types(self.dtype(), other.dtype());
  HG_CHECK(result == self.dtype() || (is_floating(self.dtype()) && is_floating(result)), def.name,
           "result type {} cannot be stored in a {} tensor", result, self.dtype());
  HG_CHECK(broadcast_shapes(self.shape(), other.shape(), def.name) == self.shape(), def.name,
           "shape {} cannot be broadcast to the output shape {}", other.shape(), self.shape());
  BackwardFn bw;
  if (call.needs_grad()) {
    // Mul and div need self's old value for other's gradient: copied before it is overwritten.
    const bool keep_self = (op == BinaryOp::Mul || op == BinaryOp::Div) && other.requires_grad();
    bw = in_place_backward(op, other, keep_self ? self.clone() : Tensor(), alpha, def.name);
  }
  // Kernels take operands of one dtype: compute in self's dtype (float16 += float32 rounds once).
  const Tensor b = internal::expanded(internal::cast(other, self.dtype()), self.shape());
  if (self.numel()) binary_stub(self.device().type, op, self, self, b, alpha);
  self.bump_version();
  finish_in_place(call, self, std::move(bw));
  return self;
}
}  // namespace

Tensor wrap_scalar(double value, const Tensor& t) {
  const bool whole = std::floor(value) == value && std::isfinite(value);
  Dtype d = t.dtype();
  if (!is_floating(d) && !(whole && d != kBool)) d = kFloat32;
  if (d == kBool && !(value == 0 || value == 1)) d = kInt64;
  return scalar_tensor(value, TensorOptions(d).device(t.device()));
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return run(kAdd, BinaryOp::Add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return run(kSub, BinaryOp::Sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return run(kMul, BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return run(kDiv, BinaryOp::Div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return run(kMaximum, BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return run(kMinimum, BinaryOp::Minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return run(kEq, BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return run(kNe, BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return run(kLt, BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return run(kLe, BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return run(kGt, BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return run(kGe, BinaryOp::Ge, a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, wrap_scalar(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, wrap_scalar(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, wrap_scalar(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, wrap_scalar(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(wrap_scalar(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(wrap_scalar(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(wrap_scalar(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(wrap_scalar(a, b), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, wrap_scalar(b, a)); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, wrap_scalar(b, a)); }
Tensor operator<(const Tensor& a, double b) { return lt(a, wrap_scalar(b, a)); }
Tensor operator<=(const Tensor& a, double b) { return le(a, wrap_scalar(b, a)); }
Tensor operator>(const Tensor& a, double b) { return gt(a, wrap_scalar(b, a)); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, wrap_scalar(b, a)); }

Tensor Tensor::add(const Tensor& o, double alpha) const { return hg::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, double alpha) const { return hg::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return hg::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return hg::div(*this, o); }

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  return run_in_place(kAddInPlace, BinaryOp::Add, *this, o, alpha);
}
Tensor& Tensor::add_(double v) { return run_in_place(kAddInPlace, BinaryOp::Add, *this, wrap_scalar(v, *this), 1.0); }
Tensor& Tensor::sub_(const Tensor& o, double alpha) {
  return run_in_place(kSubInPlace, BinaryOp::Sub, *this, o, alpha);
}
Tensor& Tensor::mul_(const Tensor& o) { return run_in_place(kMulInPlace, BinaryOp::Mul, *this, o, 1.0); }
Tensor& Tensor::mul_(double v) { return run_in_place(kMulInPlace, BinaryOp::Mul, *this, wrap_scalar(v, *this), 1.0); }
Tensor& Tensor::div_(const Tensor& o) { return run_in_place(kDivInPlace, BinaryOp::Div, *this, o, 1.0); }
Tensor& Tensor::div_(double v) { return run_in_place(kDivInPlace, BinaryOp::Div, *this, wrap_scalar(v, *this), 1.0); }

Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator+=(Tensor& a, double b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, double b) { return a.add_(-b); }
Tensor& operator*=(Tensor& a, double b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, double b) { return a.div_(b); }

}  // namespace hg
