#include "framework/ops/unary_kernels.h"

#include <cmath>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/view_history.h"

namespace hg {

HG_DEFINE_STUB(unary_stub, UnaryFn);
HG_DEFINE_OPTIONAL_STUB(relu_backward_stub, ReluBackwardFn);
HG_DEFINE_OPTIONAL_STUB(gelu_backward_stub, GeluBackwardFn);

namespace {
const OpDef kNeg{"neg", true};
const OpDef kExp{"exp", true};
const OpDef kLog{"log", true};
const OpDef kLog1p{"log1p", true};
const OpDef kSqrt{"sqrt", true};
const OpDef kRsqrt{"rsqrt", true};
const OpDef kReciprocal{"reciprocal", true};
const OpDef kAbs{"abs", true};
const OpDef kSigmoid{"sigmoid", true};
const OpDef kTanh{"tanh", true};
const OpDef kRelu{"relu", true};
const OpDef kReluInPlace{"relu_", true};
const OpDef kGelu{"gelu", true};
const OpDef kSoftplus{"softplus", true};
const OpDef kPowScalar{"pow", true};
const OpDef kErf{"erf", true};
const OpDef kLeakyRelu{"leaky_relu", true};
const OpDef kElu{"elu", true};
const OpDef kSelu{"selu", true};
const OpDef kMish{"mish", true};
const OpDef kHardswish{"hardswish", true};
// selu's constants, as PyTorch's.
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
// The fused gradient kernels, recorded as ops of their own (marked backward by the engine).
const OpDef kReluBackward{"relu_backward", false};
const OpDef kGeluBackward{"gelu_backward", false};

bool keeps_integers(UnaryOp op) { return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu; }

// g * f'(v) by a fused gradient kernel, recorded as op `def`, or an undefined tensor where it does
// not apply: grad mode on (create_graph records the public-op formula instead), no kernel on the
// device, or operands that differ in dtype, shape or device. launch(out) runs the kernel.
template <class Launch>
Tensor fused_gradient(const OpDef& def, bool has_kernel, const Tensor& g, const Tensor& v, Launch launch) {
  if (GradMode::is_enabled() || !has_kernel || g.dtype() != v.dtype() || g.shape() != v.shape() ||
      g.device() != v.device())
    return Tensor();
  OpCall call(def, {g, v});
  // In the operands' layout (a channels-last activation's gradient stays channels-last).
  Tensor out =
      empty(g.shape(), TensorOptions(g.dtype()).device(g.device()), internal::output_format(g.shape(), {&g, &v}));
  if (out.numel()) launch(out);
  call.finish({&out});
  return out;
}

Tensor fused_gelu_backward(const Tensor& g, const Tensor& x, bool approx) {
  const DeviceType dev = g.device().type;
  return fused_gradient(kGeluBackward, gelu_backward_stub.has(dev), g, x,
                        [&](const Tensor& out) { gelu_backward_stub(dev, out, g, x, approx); });
}

// The gradient of op at x (saved input) / y (saved output), times the incoming gradient g.
Tensor derivative(UnaryOp op, const Tensor& g, const Tensor& x, const Tensor& y, double p0, double p1) {
  switch (op) {
    case UnaryOp::Neg: return neg(g);
    case UnaryOp::Exp: return g * y;
    case UnaryOp::Log: return g / x;
    case UnaryOp::Log1p: return g / (x + 1.0);
    case UnaryOp::Sqrt: return g / (y * 2.0);
    case UnaryOp::Rsqrt: return g * pow(y, 3.0) * -0.5;
    case UnaryOp::Reciprocal: return -g * y * y;
    case UnaryOp::Abs: return g * (gt(x, zeros_like(x)).to(g.dtype()) - lt(x, zeros_like(x)).to(g.dtype()));
    case UnaryOp::Sigmoid: return g * y * (1.0 - y);
    case UnaryOp::Tanh: return g * (1.0 - y * y);
    case UnaryOp::Relu: {
      const DeviceType dev = g.device().type;
      if (Tensor fused = fused_gradient(kReluBackward, relu_backward_stub.has(dev), g, y,
                                        [&](const Tensor& out) { relu_backward_stub(dev, out, g, y); });
          fused.defined())
        return fused;
      return g * gt(y, zeros_like(y)).to(g.dtype());
    }
    case UnaryOp::Gelu: {
      if (Tensor fused = fused_gelu_backward(g, x, false); fused.defined()) return fused;
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      Tensor cdf = (1.0 + erf(x * M_SQRT1_2)) * 0.5;
      return g * (cdf + x * exp(x * x * -0.5) * (0.5 * M_2_SQRTPI * M_SQRT1_2));
    }
    case UnaryOp::GeluTanh: {
      if (Tensor fused = fused_gelu_backward(g, x, true); fused.defined()) return fused;
      constexpr double k = 0.7978845608028654, c = 0.044715;  // sqrt(2/pi)
      Tensor inner = (x + pow(x, 3.0) * c) * k;
      Tensor th = tanh(inner);
      Tensor dinner = (1.0 + x * x * (3 * c)) * k;
      return g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * dinner);
    }
    case UnaryOp::Softplus: {
      // sigmoid(beta x), and 1 where beta x > threshold
      Tensor bx = x * p0;
      Tensor s = sigmoid(bx);
      Tensor above = gt(bx, full_like(bx, p1)).to(g.dtype());
      return g * (s * (1.0 - above) + above);
    }
    case UnaryOp::Erf: return g * exp(x * x * -1.0) * M_2_SQRTPI;
    case UnaryOp::PowScalar: return p0 == 0 ? zeros_like(g) : g * pow(x, p0 - 1.0) * p0;
    // The piecewise gradients select with where(), not a 0/1 mask times each branch: a branch
    // that overflows where it is not taken (exp(x) for large x) would make inf * 0 = NaN.
    case UnaryOp::LeakyRelu: return where(gt(x, zeros_like(x)), g, g * p0);
    case UnaryOp::Elu: return where(gt(x, zeros_like(x)), g * p1, g * exp(x) * (p0 * p1));
    case UnaryOp::Mish: {
      // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x), as PyTorch's mish_backward.
      Tensor th = tanh(softplus(x));
      return g * (th + x * sigmoid(x) * (1.0 - th * th));
    }
    case UnaryOp::Hardswish: {
      // 0 below -3, x / 3 + 1/2 on [-3, 3), 1 from 3 on (PyTorch 1.13's hardswish_backward, boundaries
      // included: 1 at x = 3, -1/2 at x = -3).
      Tensor mid = where(lt(x, full_like(x, 3.0)), g * (x / 3.0 + 0.5), g);
      return where(lt(x, full_like(x, -3.0)), zeros_like(g), mid);
    }
  }
  return Tensor();
}

Tensor run(const OpDef& def, UnaryOp op, const Tensor& t, double p0 = 0, double p1 = 0) {
  OpCall call(def, {t});
  const Tensor& x = call.input(0);
  HG_CHECK(x.defined(), def.name, "got an undefined tensor");
  HG_CHECK(x.dtype() != kBool, def.name, "not supported on bool tensors");
  const Dtype dtype = is_floating(x.dtype()) || keeps_integers(op) ? x.dtype() : kFloat32;
  const Tensor in = x.dtype() == dtype ? x : x.to(dtype);
  Tensor out = empty(x.shape(), TensorOptions(dtype).device(x.device()), internal::output_format(x.shape(), {&x}));
  if (out.numel()) unary_stub(x.device().type, op, out, in, p0, p1);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [op, p0, p1, sx = SavedTensor(x, def.name), sy = SavedTensor::output(out, def.name)](
             const TensorList& g) -> TensorList { return {derivative(op, g[0], sx.get(), sy.get(), p0, p1)}; };
  }
  call.finish({&out}, std::move(bw));
  return out;
}
}  // namespace

Tensor relu_gradient(const Tensor& g, const Tensor& y) { return derivative(UnaryOp::Relu, g, Tensor(), y, 0, 0); }
Tensor gelu_gradient(const Tensor& g, const Tensor& x, bool approx) {
  return derivative(approx ? UnaryOp::GeluTanh : UnaryOp::Gelu, g, x, Tensor(), 0, 0);
}

Tensor neg(const Tensor& t) { return run(kNeg, UnaryOp::Neg, t); }
Tensor exp(const Tensor& t) { return run(kExp, UnaryOp::Exp, t); }
Tensor log(const Tensor& t) { return run(kLog, UnaryOp::Log, t); }
Tensor log1p(const Tensor& t) { return run(kLog1p, UnaryOp::Log1p, t); }
Tensor sqrt(const Tensor& t) { return run(kSqrt, UnaryOp::Sqrt, t); }
Tensor rsqrt(const Tensor& t) { return run(kRsqrt, UnaryOp::Rsqrt, t); }
Tensor reciprocal(const Tensor& t) { return run(kReciprocal, UnaryOp::Reciprocal, t); }
Tensor abs(const Tensor& t) { return run(kAbs, UnaryOp::Abs, t); }
Tensor sigmoid(const Tensor& t) { return run(kSigmoid, UnaryOp::Sigmoid, t); }
Tensor tanh(const Tensor& t) { return run(kTanh, UnaryOp::Tanh, t); }
Tensor relu(const Tensor& t) { return run(kRelu, UnaryOp::Relu, t); }
Tensor gelu(const Tensor& t, bool approx) { return run(kGelu, approx ? UnaryOp::GeluTanh : UnaryOp::Gelu, t); }
Tensor softplus(const Tensor& t, double beta, double threshold) {
  HG_CHECK(beta != 0, "softplus", "beta must be non-zero");
  return run(kSoftplus, UnaryOp::Softplus, t, beta, threshold);
}
Tensor erf(const Tensor& t) { return run(kErf, UnaryOp::Erf, t); }
Tensor leaky_relu(const Tensor& t, double negative_slope) {
  HG_CHECK(std::isfinite(negative_slope), "leaky_relu", "negative_slope must be finite, got {}", negative_slope);
  return run(kLeakyRelu, UnaryOp::LeakyRelu, t, negative_slope);
}
Tensor elu(const Tensor& t, double alpha) {
  HG_CHECK(std::isfinite(alpha), "elu", "alpha must be finite, got {}", alpha);
  return run(kElu, UnaryOp::Elu, t, alpha, 1.0);
}
Tensor selu(const Tensor& t) { return run(kSelu, UnaryOp::Elu, t, kSeluAlpha, kSeluScale); }
Tensor mish(const Tensor& t) { return run(kMish, UnaryOp::Mish, t); }
Tensor hardswish(const Tensor& t) { return run(kHardswish, UnaryOp::Hardswish, t); }
Tensor pow(const Tensor& t, double exponent) { return run(kPowScalar, UnaryOp::PowScalar, t, exponent); }

Tensor& Tensor::relu_() {
  check_in_place(*this, "relu_");
  OpCall call(kReluInPlace, {*this});
  HG_CHECK(dtype() != kBool, "relu_", "not supported on bool tensors");
  if (numel()) unary_stub(device().type, UnaryOp::Relu, *this, *this, 0.0, 0.0);
  bump_version();
  BackwardFn bw;
  if (call.needs_grad()) {
    // The mask comes from the result: positive exactly where the input was.
    bw = [sy = SavedTensor::output(*this, "relu_")](const TensorList& g) -> TensorList {
      const Tensor y = sy.get().detach();
      return {g[0] * gt(y, zeros_like(y)).to(g[0].dtype())};
    };
  }
  finish_in_place(call, *this, std::move(bw));
  return *this;
}

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor Tensor::neg() const { return hg::neg(*this); }
Tensor Tensor::exp() const { return hg::exp(*this); }
Tensor Tensor::log() const { return hg::log(*this); }
Tensor Tensor::sqrt() const { return hg::sqrt(*this); }
Tensor Tensor::rsqrt() const { return hg::rsqrt(*this); }
Tensor Tensor::pow(double e) const { return hg::pow(*this, e); }
Tensor Tensor::abs() const { return hg::abs(*this); }
Tensor Tensor::sigmoid() const { return hg::sigmoid(*this); }
Tensor Tensor::tanh() const { return hg::tanh(*this); }
Tensor Tensor::relu() const { return hg::relu(*this); }
Tensor Tensor::gelu(bool approx) const { return hg::gelu(*this, approx); }
Tensor Tensor::softplus(double beta, double threshold) const { return hg::softplus(*this, beta, threshold); }

}  // namespace hg
