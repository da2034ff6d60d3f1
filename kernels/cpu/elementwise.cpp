// CPU kernels for the unary and binary elementwise ops.
#include "framework/ops/binary_kernels.h"
#include "framework/ops/unary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

void binary_cpu(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_dtype(a.dtype(), [&]<class T>(TypeTag<T>) {
    using Acc = acc_t<T>;
    if (op >= BinaryOp::Eq) {
      binary_loop<bool, T, T>(out, a, b, [op](T x, T y) { return scalar::compare<Acc>(op, Acc(x), Acc(y)); });
      return;
    }
    if constexpr (std::is_same_v<T, bool>) {
      binary_loop<bool, bool, bool>(out, a, b,
                                    [op](bool x, bool y) { return op == BinaryOp::Maximum ? (x || y) : (x && y); });
    } else {
      const Acc al = static_cast<Acc>(alpha);
      // Switch outside the loop so each loop body is a single expression the compiler vectorises.
      switch (op) {
        case BinaryOp::Add:
          if (alpha == 1.0) {
            binary_loop<T, T, T>(out, a, b, [](T x, T y) { return T(Acc(x) + Acc(y)); });
          } else {  // the optimizers' p.add_(d, -lr)
            binary_loop<T, T, T>(out, a, b, [al](T x, T y) { return T(Acc(x) + al * Acc(y)); });
          }
          return;
        case BinaryOp::Sub: binary_loop<T, T, T>(out, a, b, [al](T x, T y) { return T(Acc(x) - al * Acc(y)); }); return;
        case BinaryOp::Mul: binary_loop<T, T, T>(out, a, b, [](T x, T y) { return T(Acc(x) * Acc(y)); }); return;
        case BinaryOp::Div: binary_loop<T, T, T>(out, a, b, [](T x, T y) { return T(Acc(x) / Acc(y)); }); return;
        default: break;
      }
      binary_loop<T, T, T>(out, a, b, [op, al](T x, T y) { return T(scalar::binary<Acc>(op, Acc(x), Acc(y), al)); });
    }
  });
}

void unary_cpu(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("unary", "not supported on bool tensors");
    } else {
      using Acc = std::conditional_t<std::is_integral_v<T>, double, acc_t<T>>;
      const Acc a0 = static_cast<Acc>(p0), a1 = static_cast<Acc>(p1);
      if (op == UnaryOp::Relu) {
        unary_loop<T, T>(out, in, [](T x) { return (Acc(x) > Acc(0) || Acc(x) != Acc(x)) ? x : T(0); });
        return;
      }
      unary_loop<T, T>(out, in, [op, a0, a1](T x) { return T(scalar::unary<Acc>(op, Acc(x), a0, a1)); });
    }
  });
}

// The product with the 0/1 mask, written so it vectorises (a NaN y selects 0, as gt does).
void relu_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y) {
  dispatch_dtype(grad_out.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("relu", "not supported on bool tensors");
    } else {
      using Acc = acc_t<T>;
      binary_loop<T, T, T>(grad_in, grad_out, y,
                           [](T g, T v) { return T(Acc(g) * (Acc(v) > Acc(0) ? Acc(1) : Acc(0))); });
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(binary_stub, kCPU, binary_cpu);
HG_REGISTER_KERNEL(unary_stub, kCPU, unary_cpu);
HG_REGISTER_KERNEL(relu_backward_stub, kCPU, relu_backward_cpu);

}  // namespace hg::cpu
