// CUDA elementwise unary maths and activations: one kernel per op, specialised on the op's
// functor from kernels/common (16-bit floats computed in float, as on the CPU; integers, which
// only neg, abs and relu see, in their own type).
#include "framework/dispatch.h"
#include "framework/ops/unary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T, class Acc, class F>
struct UnaryMap {
  F f;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return f(x);
    } else {
      return from_acc<T>(f(static_cast<Acc>(to_acc(x))));
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
      scalar::dispatch_unary(op, [&]<class F>(scalar::OpTag<F>) {
        if constexpr (std::is_integral_v<T> && !scalar::keeps_integers<F>) {
          fail("unary", "got an integer tensor of dtype {}", dtype_of<T>);  // the op layer converts these
        } else {
          launch_unary<T, T>(out, in, UnaryMap<T, acc_t<T>, F>{scalar::make_unary<F>(p0, p1)}, "unary");
        }
      });
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(unary_stub, kCUDA, unary_cuda);

}  // namespace hg::cuda
