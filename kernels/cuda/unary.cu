// CUDA elementwise unary maths and activations (scalar maths from kernels/common; 16-bit floats
// computed in float, integers in double, as on the CPU).
#include "framework/dispatch.h"
#include "framework/ops/unary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T, class Acc>
struct UnaryFn {
  UnaryOp op;
  Acc p0, p1;
  __device__ __forceinline__ T operator()(T x) const {
    const Acc v = static_cast<Acc>(to_acc(x));
    const Acc r = scalar::unary<Acc>(op, v, p0, p1);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(r);
    } else {
      return from_acc<T>(r);
    }
  }
};

void unary_cuda(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  HG_CHECK(out.device() == in.device(), "unary", "expected tensors on one device, got {} and {}", out.device(),
           in.device());
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("unary", "not supported on bool tensors");
    } else {
      using Acc = std::conditional_t<std::is_integral_v<T>, double, acc_t<T>>;
      launch_unary<T, T>(out, in, UnaryFn<T, Acc>{op, static_cast<Acc>(p0), static_cast<Acc>(p1)}, "unary");
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(unary_stub, kCUDA, unary_cuda);

}  // namespace hg::cuda
