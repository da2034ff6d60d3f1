// linear_gelu_linear: argument checks, the forward (one GELU-epilogue GEMM where the device has
// it, else linear's and gelu's own kernels) and the backward (the GELU gradient and the first
// bias gradient in the epilogue of the GEMM that makes the hidden gradient, where the device has
// it; else mm, gelu's gradient and sum).
#include "framework/ops/linear_fused_kernels.h"

#include <tuple>

#include "framework/backward.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/matmul.h"
#include "framework/ops/matmul_kernels.h"
#include "framework/ops/reduce.h"
#include "framework/ops/unary.h"
#include "framework/ops/unary_kernels.h"

namespace hg {

HG_DEFINE_OPTIONAL_STUB(gemm_gelu_aux_stub, GemmGeluAuxFn);
HG_DEFINE_OPTIONAL_STUB(gemm_dgelu_bgrad_stub, GemmDGeluBGradFn);

namespace {
const OpDef kLinearGeluLinear{"linear_gelu_linear", true};

void check_mlp_operands(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  constexpr const char* op = "linear_gelu_linear";
  HG_CHECK(x.defined() && w1.defined() && w2.defined(), op, "got an undefined input or weight");
  HG_CHECK(is_floating(x.dtype()), op, "expected a floating-point input, got {}", x.dtype());
  for (const Tensor* t : {&w1, &b1, &w2, &b2}) {
    if (!t->defined()) continue;
    HG_CHECK(t->device() == x.device(), op, "a weight or bias is on {} but the input is on {}", t->device(),
             x.device());
    HG_CHECK(t->dtype() == x.dtype(), op,
             "weights and biases must have the input's dtype {}, got {} (shape {}); convert them, or run inside an "
             "autocast region",
             x.dtype(), t->dtype(), t->shape());
  }
  HG_CHECK(w1.dim() == 2 && w2.dim() == 2, op, "weights must be 2-d [out, in], got shapes {} and {}", w1.shape(),
           w2.shape());
  HG_CHECK(x.dim() >= 1 && x.size(-1) == w1.shape()[1], op,
           "input shape {} does not end in fc_weight's in_features {} (fc_weight shape {})", x.shape(), w1.shape()[1],
           w1.shape());
  HG_CHECK(w2.shape()[1] == w1.shape()[0], op, "proj_weight of shape {} does not take fc_weight's {} outputs",
           w2.shape(), w1.shape()[0]);
  HG_CHECK(!b1.defined() || b1.shape() == Shape{w1.shape()[0]}, op, "fc_bias must have shape [{}], got {}",
           w1.shape()[0], b1.shape());
  HG_CHECK(!b2.defined() || b2.shape() == Shape{w2.shape()[0]}, op, "proj_bias must have shape [{}], got {}",
           w2.shape()[0], b2.shape());
}
}  // namespace

Tensor linear_gelu_linear(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in, const Tensor& w2_in,
                          const Tensor& b2_in) {
  // An fp8 region runs the two GEMMs as its fp8 linears, the GELU between them as usual.
  if (Tensor r = op_override(kLinearGeluLinear, {x_in, w1_in, b1_in, w2_in, b2_in}); r.defined()) return r;
  OpCall call(kLinearGeluLinear, {x_in, w1_in, b1_in, w2_in, b2_in});
  const Tensor& x = call.input(0);
  const Tensor& w1 = call.input(1);
  const Tensor& b1 = call.input(2);
  const Tensor& w2 = call.input(3);
  const Tensor& b2 = call.input(4);
  check_mlp_operands(x, w1, b1, w2, b2);
  const int64_t in = w1.shape()[1], hidden = w1.shape()[0], out_features = w2.shape()[0];
  const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  const DeviceType dev = x.device().type;
  const Tensor x2 = internal::reshaped(x, {rows, in});
  Tensor pre, h, y;
  {
    NoGradGuard no_grad;  // one node for the whole op, below
    bool fused = false;
    if (gemm_gelu_aux_stub.has(dev) && b1.defined() && rows > 0 && in > 0 && hidden > 0 && hidden % 8 == 0) {
      pre = empty({rows, hidden}, TensorOptions(x.dtype()).device(x.device()));
      h = empty({rows, hidden}, TensorOptions(x.dtype()).device(x.device()));
      fused = gemm_gelu_aux_stub(dev, h, pre, x2, internal::transposed(w1), b1);
    }
    if (!fused) {
      pre = linear(x2, w1, b1);
      h = gelu(pre, true);
    }
    y = linear(h, w2, b2);
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = internal::alias_contiguous(y, out_shape);
  BackwardFn bw;
  if (call.needs_grad()) {
    constexpr const char* op = "linear_gelu_linear";
    bw = [sx = SavedTensor(x, op), sw1 = SavedTensor(w1, op), sb1 = b1.defined() ? SavedTensor(b1, op) : SavedTensor(),
          sw2 = SavedTensor(w2, op), pre, h, need_x = x.requires_grad(), need_w1 = w1.requires_grad(),
          need_b1 = b1.defined() && b1.requires_grad(), need_w2 = w2.requires_grad(),
          need_b2 = b2.defined() && b2.requires_grad(), in, hidden, out_features](const TensorList& g) -> TensorList {
      const Tensor& x = sx.get();
      const Tensor& w1 = sw1.get();
      const Tensor& w2 = sw2.get();
      const Tensor g2 = g[0].reshape({-1, out_features});
      const Tensor x2 = x.reshape({-1, in});
      if (GradMode::is_enabled()) {
        // create_graph: the hidden activations recomputed and every formula in public ops, so the
        // gradients differentiate again.
        const Tensor pre_r = linear(x2, w1, sb1.get());
        const Tensor gpre = gelu_gradient(mm(g2, w2), pre_r, true);
        return {need_x ? mm(gpre, w1).reshape(x.shape()) : Tensor(), need_w1 ? mm(gpre.t(), x2) : Tensor(),
                need_b1 ? sum(gpre, {0}) : Tensor(), need_w2 ? mm(g2.t(), gelu(pre_r, true)) : Tensor(),
                need_b2 ? sum(g2, {0}) : Tensor()};
      }
      Tensor gw2, gb2;
      if (need_w2 && need_b2) {
        std::tie(gw2, gb2) = linear_param_gradients(g2, h, 3);
      } else {
        gw2 = need_w2 ? mm(g2.t(), h) : Tensor();
        gb2 = need_b2 ? sum(g2, {0}) : Tensor();
      }
      if (!need_x && !need_w1 && !need_b1) return {Tensor(), Tensor(), Tensor(), gw2, gb2};
      const DeviceType dev = g2.device().type;
      const int64_t rows = g2.shape()[0];
      Tensor gpre, gb1;
      bool fused = false;
      if (gemm_dgelu_bgrad_stub.has(dev) && need_b1 && g2.dtype() == w2.dtype() && g2.dtype() == pre.dtype() &&
          rows > 0 && out_features > 0 && hidden % 8 == 0) {
        gpre = empty({rows, hidden}, TensorOptions(g2.dtype()).device(g2.device()));
        gb1 = empty({hidden}, TensorOptions(g2.dtype()).device(g2.device()));
        fused = gemm_dgelu_bgrad_stub(dev, gpre, gb1, g2, w2, pre);
      }
      if (!fused) {
        gpre = gelu_gradient(mm(g2, w2), pre, true);
        gb1 = need_b1 ? sum(gpre, {0}) : Tensor();
      }
      return {need_x ? mm(gpre, w1).reshape(x.shape()) : Tensor(), need_w1 ? mm(gpre.t(), x2) : Tensor(), gb1, gw2,
              gb2};
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
