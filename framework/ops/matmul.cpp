#include "framework/ops/matmul_kernels.h"

#include <utility>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/reduce.h"
#include "framework/ops/views.h"

namespace hg {

HG_DEFINE_STUB(gemm_stub, GemmFn);
HG_DEFINE_OPTIONAL_STUB(gemm_bias_stub, GemmBiasFn);
HG_DEFINE_OPTIONAL_STUB(gemm_widened_stub, GemmWidenedFn);
HG_DEFINE_OPTIONAL_STUB(gemm_bias_grad_stub, GemmBiasGradFn);

namespace {
const OpDef kMm{"mm", true};
const OpDef kBmm{"bmm", true};
const OpDef kLinear{"linear", {.writes_widened_gradients = true}};

void check_operands(std::string_view op, const Tensor& a, const Tensor& b) {
  HG_CHECK(a.defined() && b.defined(), op, "got an undefined tensor");
  HG_CHECK(a.device() == b.device(), op, "tensors are on different devices: {} and {}", a.device(), b.device());
  HG_CHECK(a.dtype() == b.dtype(), op,
           "expected both operands to have the same dtype, got {} ({}) and {} ({}); convert one with to(), or "
           "run inside an autocast region",
           a.dtype(), a.shape(), b.dtype(), b.shape());
  HG_CHECK(is_floating(a.dtype()), op, "expected floating-point operands, got {}", a.dtype());
  if (is_float8(a.dtype())) refuse_float8(a.dtype(), op);
}

// A [1, rows, cols] alias of a 2-d tensor, for the batched kernel (no op recorded).
Tensor as_batch(const Tensor& t) {
  return internal::alias(t, {1, t.shape()[0], t.shape()[1]}, {0, t.strides()[0], t.strides()[1]}, t.offset());
}

Tensor gemm_2d(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.shape()[0], b.shape()[1]}, TensorOptions(a.dtype()).device(a.device()));
  if (out.numel()) gemm_stub(a.device().type, as_batch(out), as_batch(a), as_batch(b));
  return out;
}

// A weight's gradient a @ b (g^T x): as float32 rounded through the 16-bit dtype where the engine
// granted it (widened_gradient_wanted) and the device writes that form in one pass, else mm.
// Either way an "mm" call (the widened one's output float32), so the op recorder times it.
Tensor weight_gradient(const Tensor& a_in, const Tensor& b_in, size_t input) {
  const DeviceType dev = a_in.device().type;
  if (!widened_gradient_wanted(input) || !is_reduced_float(a_in.dtype()) || !gemm_widened_stub.has(dev) ||
      a_in.shape()[1] == 0)
    return mm(a_in, b_in);
  OpCall call(kMm, {a_in, b_in});
  const Tensor& a = call.input(0);
  const Tensor& b = call.input(1);
  check_operands("mm", a, b);
  Tensor out = empty({a.shape()[0], b.shape()[1]}, TensorOptions(kFloat32).device(a.device()));
  if (out.numel() && gemm_widened_stub(dev, out, a, b)) internal::note_all_finite(out);
  call.finish({&out});
  return out;
}
}  // namespace

// Not under create_graph (the pair would not be differentiable), and not where the weight
// gradient goes on widened (the bias-gradient GEMM writes g2's dtype).
std::pair<Tensor, Tensor> linear_param_gradients(const Tensor& g2, const Tensor& x2, size_t weight_input) {
  const DeviceType dev = g2.device().type;
  const bool widened =
      widened_gradient_wanted(weight_input) && is_reduced_float(g2.dtype()) && gemm_widened_stub.has(dev);
  if (GradMode::is_enabled() || widened || !gemm_bias_grad_stub.has(dev) || g2.dtype() != x2.dtype() ||
      g2.shape()[0] == 0 || g2.shape()[1] == 0 || x2.shape()[1] == 0)
    return {weight_gradient(g2.t(), x2, weight_input), sum(g2, {0})};
  OpCall call(kMm, {g2.t(), x2});
  const Tensor& a = call.input(0);
  const Tensor& b = call.input(1);
  check_operands("mm", a, b);
  Tensor gw = empty({a.shape()[0], b.shape()[1]}, TensorOptions(a.dtype()).device(a.device()));
  Tensor gb = empty({a.shape()[0]}, TensorOptions(a.dtype()).device(a.device()));
  gemm_bias_grad_stub(dev, gw, a, b, gb);
  call.finish({&gw});
  return {gw, gb};
}

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  if (Tensor r = op_override(kMm, {a_in, b_in}); r.defined()) return r;  // an fp8 region's GEMM
  OpCall call(kMm, {a_in, b_in});
  const Tensor& a = call.input(0);
  const Tensor& b = call.input(1);
  check_operands("mm", a, b);
  HG_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expected 2-d tensors, got shapes {} and {}", a.shape(), b.shape());
  HG_CHECK(a.shape()[1] == b.shape()[0], "mm", "shapes {} and {} cannot be multiplied ({} != {})", a.shape(), b.shape(),
           a.shape()[1], b.shape()[0]);
  Tensor out = gemm_2d(a, b);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sa = SavedTensor(a, "mm"), sb = SavedTensor(b, "mm"), need_a = a.requires_grad(),
          need_b = b.requires_grad()](const TensorList& g) -> TensorList {
      return {need_a ? mm(g[0], sb.get().t()) : Tensor(), need_b ? mm(sa.get().t(), g[0]) : Tensor()};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  OpCall call(kBmm, {a_in, b_in});
  const Tensor& a = call.input(0);
  const Tensor& b = call.input(1);
  check_operands("bmm", a, b);
  HG_CHECK(a.dim() == 3 && b.dim() == 3, "bmm", "expected 3-d tensors, got shapes {} and {}", a.shape(), b.shape());
  HG_CHECK(a.shape()[0] == b.shape()[0] && a.shape()[2] == b.shape()[1], "bmm",
           "shapes {} and {} cannot be multiplied batch by batch", a.shape(), b.shape());
  Tensor out = empty({a.shape()[0], a.shape()[1], b.shape()[2]}, TensorOptions(a.dtype()).device(a.device()));
  if (out.numel()) gemm_stub(a.device().type, out, a, b);
  BackwardFn bw;
  if (call.needs_grad()) {
    bw = [sa = SavedTensor(a, "bmm"), sb = SavedTensor(b, "bmm")](const TensorList& g) -> TensorList {
      return {bmm(g[0], sb.get().transpose(1, 2)), bmm(sa.get().transpose(1, 2), g[0])};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  HG_CHECK(a.defined() && b.defined(), "matmul", "got an undefined tensor");
  HG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "both arguments need at least 1 dim, got shapes {} and {}",
           a.shape(), b.shape());
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() == 1 && b.dim() == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  // Batched: broadcast the batch dims, fold them into one, and run bmm.
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  HG_CHECK(b.size(-2) == k, "matmul", "shapes {} and {} cannot be multiplied ({} != {})", a.shape(), b.shape(), k,
           b.size(-2));
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  const int64_t nb = numel_of(batch);
  Tensor out = bmm(a.expand(a_full).reshape({nb, m, k}), b.expand(b_full).reshape({nb, k, n}));
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  return out.reshape(out_shape);
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  if (Tensor r = op_override(kLinear, {x_in, w_in, b_in}); r.defined()) return r;  // an fp8 region's GEMM
  OpCall call(kLinear, {x_in, w_in, b_in});
  const Tensor& x = call.input(0);
  const Tensor& w = call.input(1);
  const Tensor& bias = call.input(2);
  check_operands("linear", x, w);
  HG_CHECK(w.dim() == 2, "linear", "weight must be 2-d [out, in], got shape {}", w.shape());
  HG_CHECK(x.dim() >= 1 && x.size(-1) == w.shape()[1], "linear",
           "input shape {} does not end in the weight's in_features {} (weight shape {})", x.shape(), w.shape()[1],
           w.shape());
  if (bias.defined()) {
    check_operands("linear", x, bias);
    HG_CHECK(bias.dim() == 1 && bias.shape()[0] == w.shape()[0], "linear", "bias must have shape [{}], got {}",
             w.shape()[0], bias.shape());
  }
  const int64_t in = w.shape()[1], out_features = w.shape()[0];
  const Tensor x2 = internal::reshaped(x, {x.numel() / std::max<int64_t>(in, 1), in});
  Tensor out2;
  const DeviceType dev = x.device().type;
  if (bias.defined() && in > 0 && gemm_bias_stub.has(dev)) {  // the bias added inside the GEMM
    out2 = empty({x2.shape()[0], out_features}, TensorOptions(x.dtype()).device(x.device()));
    if (out2.numel()) gemm_bias_stub(dev, out2, x2, internal::transposed(w), bias);
  } else {
    out2 = gemm_2d(x2, internal::transposed(w));
    if (bias.defined() && out2.numel()) {
      binary_stub(dev, BinaryOp::Add, out2, out2, internal::expanded(bias, out2.shape()), 1.0);
    }
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = internal::alias_contiguous(out2, out_shape);
  BackwardFn bw;
  if (call.needs_grad()) {
    // Only the gradients some input needs: a first layer's input gradient is a whole GEMM.
    bw = [sx = SavedTensor(x, "linear"), sw = SavedTensor(w, "linear"), need_x = x.requires_grad(),
          need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad(), in,
          out_features](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();
      Tensor g2 = g[0].reshape({-1, out_features});
      Tensor gx = need_x ? mm(g2, sw.get()).reshape(x.shape()) : Tensor();
      if (need_w && need_b) {
        auto [gw, gb] = linear_param_gradients(g2, x.reshape({-1, in}), 1);
        return {gx, gw, gb};
      }
      Tensor gw = need_w ? weight_gradient(g2.t(), x.reshape({-1, in}), 1) : Tensor();
      Tensor gb = need_b ? sum(g2, {0}) : Tensor();
      return {gx, gw, gb};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

Tensor Tensor::mm(const Tensor& o) const { return hg::mm(*this, o); }
Tensor Tensor::matmul(const Tensor& o) const { return hg::matmul(*this, o); }

}  // namespace hg
